"""A user's own training script run by dtgui: real TensorFlow, real processes, no changes to
the scripts (tests/script_projects/)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from runs import live_members

from dtgui.core.events import read_all
from dtgui.core.plans.plan import Plan, TaskSpec
from dtgui.core.plans.strategies import Strategy
from dtgui.core.run_curves import final_loss_of_bundle
from dtgui.core.scripts.script import ScriptModel
from dtgui.launch.controller import RunController
from dtgui.launch.start.pipeline import launch_plan

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
PROJECTS = ROOT / "tests" / "script_projects"


def script_plan(project: str, entry: str, *,
                strategy: Strategy = Strategy.MULTI_WORKER_MIRRORED, args: tuple[str, ...] = (),
                legacy: bool = False, **changes: Any) -> Plan:
    model = ScriptModel(str(PROJECTS / project), entry, args, {}, legacy)
    workers = 2 if strategy == "multi_worker_mirrored" else 1
    replicas = 1 if strategy in ("multi_worker_mirrored", "one_device") else 2
    return Plan(run_name=f"script-{project}", strategy=strategy, workers=workers,
                replicas_per_task=replicas, checkpoint_every=0, model=model, **changes)


def wait_done(controller: RunController, timeout: float = 240) -> None:
    assert controller.wait(timeout), "the run did not end in time"


def wait_for_scalars(controller: RunController, poll: float = 0.2) -> None:
    """Until the script's first scalar arrives (the run must not end before)."""
    deadline = time.monotonic() + 120
    while not controller.metrics.scalars.tags() and time.monotonic() < deadline:
        assert not controller.wait(poll), controller.message
    assert controller.metrics.scalars.tags(), "the script never wrote a scalar"


def test_keras_fit_multi_worker_with_tf_keras_shows_its_tensorboard_curves_live(
        tmp_path: Path) -> None:
    plan = script_plan("mwm_fit", "main.py", args=("6", "3"), legacy=True)
    controller = launch_plan(plan, tmp_path / "runs")
    seen_live: list[int] = []
    while not controller.wait(0.1):
        tags = controller.metrics.scalars.snapshot()
        states = controller.metrics.snapshot().tasks
        if tags and all(s.status == "running" for s in states.values()):
            seen_live.append(sum(len(x) for t in tags.values() for x, _ in t.values()))
    assert controller.state == "finished", controller.message
    assert seen_live, "no scalar reached the dashboard while the script trained"
    scalars = controller.metrics.scalars.snapshot()
    assert {"train/epoch_loss", "train/epoch_accuracy"} <= set(scalars)
    chief = scalars["train/epoch_loss"]["worker:0"]
    assert list(chief[0]) == [0, 1, 2, 3, 4, 5]  # one point per epoch, in order
    assert "worker:1" in scalars["train/epoch_loss"]  # the other worker's own curve
    loss = controller.metrics.scalars.loss_series()
    assert set(loss) == {"worker:0", "worker:1"}
    log = controller.bundle.log_file(controller.bundle.plan.tasks[0]).read_text()
    assert "tf_keras" in log  # the script ran with legacy Keras
    assert controller.metrics.snapshot().step >= 0


def test_stop_leaves_no_process(tmp_path: Path) -> None:
    # the policy, not TensorFlow: a script without it (sleepy_loop) under the real supervisor
    plan = script_plan("sleepy_loop", "train.py", args=("1000", "0.2"))
    controller = launch_plan(plan, tmp_path / "runs")
    wait_for_scalars(controller)
    pgids = controller.pgids()
    controller.request_stop()
    wait_done(controller, 30)
    assert controller.state == "stopped"
    assert live_members(pgids) == []


def test_a_script_that_trains_on_after_sigterm_gets_sigint_one_that_saves_keeps_its_grace(
        tmp_path: Path) -> None:
    """Asked to stop, a script that ignores SIGTERM (as TensorFlow's MultiWorkerMirrored
    makes a script without a handler of its own) and goes on training is sent SIGINT, Python's
    KeyboardInterrupt, by each task's supervisor; one whose handler ends the epoch in flight
    and saves (a second) is left to do it. Both runs at once, two workers each."""
    ignoring, saving = (launch_plan(script_plan("sleepy_loop", "train.py",
                                                args=("1000", "0.2", on_sigterm)),
                                    tmp_path / on_sigterm) for on_sigterm in ("ignore", "save"))
    def both_trained() -> bool:  # each script is past its start: its handler is in place
        shown = [c.metrics.scalars.snapshot().get("train/epoch_loss", {})
                 for c in (ignoring, saving)]
        return all(set(s) == {"worker:0", "worker:1"} for s in shown)

    deadline = time.monotonic() + 120
    while not both_trained():
        assert not ignoring.finished and not saving.finished, (ignoring.message,
                                                                 saving.message)
        assert time.monotonic() < deadline, "no epoch from every worker"
        time.sleep(0.1)
    pgids = ignoring.pgids() + saving.pgids()
    for controller in (ignoring, saving):
        controller.request_stop()
    for controller in (ignoring, saving):
        wait_done(controller, 60)
        assert controller.state == "stopped", controller.message
    assert live_members(pgids) == []
    for task in ignoring.bundle.plan.tasks:
        log = ignoring.bundle.log_file(task).read_text()
        assert "KeyboardInterrupt" in log, log[-2000:]
        said = [e.get("message") for e in read_all(ignoring.bundle.events_file(task))
                if e.kind == "log"]
        assert "The script went on training after it was asked to stop: SIGINT sent" in said
    saved = sorted((saving.bundle.output / "checkpoints").glob("saved-*"))
    assert len(saved) == 2, saved  # each worker's save, whole
    for task in saving.bundle.plan.tasks:
        log = saving.bundle.log_file(task).read_text()
        assert "saved at epoch" in log and "KeyboardInterrupt" not in log, log[-2000:]


def test_custom_loop_report_gives_per_replica_curves(tmp_path: Path) -> None:
    plan = script_plan("custom_loop", "train.py", strategy=Strategy.MIRRORED, steps=5,
                       per_replica_batch=8)
    controller = launch_plan(plan, tmp_path / "runs")
    wait_done(controller)
    assert controller.state == "finished", controller.message
    snap = controller.metrics.snapshot()
    assert sorted(snap.replica_loss) == [0, 1]
    for steps, losses in snap.replica_loss.values():
        assert list(steps) == [1, 2, 3, 4, 5]
        assert all(v > 0 for v in losses)
    assert snap.step == 5
    assert list(controller.metrics.scalars.snapshot()["lr"]["worker:0"][1]) == [0.05] * 5


def test_script_that_raises_fails_the_run_with_its_own_error_line(tmp_path: Path) -> None:
    plan = script_plan("raises", "train.py")
    controller = launch_plan(plan, tmp_path / "runs")
    started = time.monotonic()  # the tasks started: the launch's own checks are behind
    wait_done(controller)
    # failed by the script's own end, not by the hang detector's wait for events
    assert time.monotonic() - started < controller.policy.stale_seconds
    assert controller.state == "failed"
    assert "FileNotFoundError: the labels file labels.csv is missing (dtgui test)" in \
        controller.message
    log = controller.metrics.log_lines("worker:0")
    assert any("Traceback" in line for line in log)  # the log view has the script's output
    assert live_members(controller.pgids()) == []
    failed = [e for e in read_all(controller.bundle.events_file(plan_task(controller)))
              if e.kind == "failed"]
    assert failed and failed[0].get("error").startswith("FileNotFoundError: the labels file")


def plan_task(controller: RunController) -> TaskSpec:
    return controller.bundle.plan.tasks[0]


def project_copy(tmp_path: Path) -> Path:
    """helper_data plus what must stay out of a bundle."""
    project = tmp_path / "helper_data"
    shutil.copytree(PROJECTS / "helper_data", project)
    (project / ".git").mkdir()
    (project / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (project / "__pycache__").mkdir()
    (project / "__pycache__" / "helper.cpython-311.pyc").write_bytes(b"\0")
    (project / ".venv" / "bin").mkdir(parents=True)
    (project / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (project / "data" / "big.bin").write_bytes(b"\0" * 100_000)
    (project / "scratch").mkdir()
    (project / "scratch" / "notes.txt").write_text("x")
    return project


def test_project_with_helper_and_data_runs_from_the_bundle_and_by_hand(tmp_path: Path) -> None:
    project = project_copy(tmp_path)
    model = ScriptModel(str(project), "train.py")
    plan = Plan(run_name="helper", strategy=Strategy.ONE_DEVICE, replicas_per_task=1,
                checkpoint_every=0, model=model)
    controller = launch_plan(plan, tmp_path / "runs")
    wait_done(controller, 60)
    assert controller.state == "finished", controller.message
    bundle = controller.bundle.path
    files = sorted(p.relative_to(bundle / "project").as_posix()
                   for p in (bundle / "project").rglob("*") if p.is_file())
    assert files == [".gitignore", "data/values.csv", "helper.py", "train.py"]
    assert (bundle / "output" / "script" / "worker-0" / "result.txt").read_text() == "7\n"

    out = tmp_path / "exported"
    subprocess.run([sys.executable, "-m", "dtgui", "export", str(out), "--strategy",
                    "one_device", "--script", str(project / "train.py"), "--project",
                    str(project)], check=True, cwd=ROOT, timeout=60)
    proc = subprocess.run(["bash", str(out / "run.sh")], env={**os.environ,
                          "PYTHON": sys.executable}, capture_output=True, text=True,
                          timeout=120, cwd="/")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (out / "output" / "script" / "worker-0" / "result.txt").read_text() == "7\n"
    assert "read 3 values, total 7" in (out / "output" / "logs" / "worker-0.log").read_text()
    readme = (out / "README.md").read_text()
    assert "cd project && \"$PYTHON\" train.py" in readme


def test_restart_resumes_a_script_with_backup_and_restore(tmp_path: Path) -> None:
    """A worker killed mid-run: every task restarts, BackupAndRestore (in the checkpoint
    folder dtgui passes) resumes the epochs, and the curve continues without a jump back."""
    import signal

    from dtgui.launch.runs.policy import RunPolicy

    plan = script_plan("mwm_fit", "main.py", args=("8", "4"), legacy=True)
    controller = launch_plan(plan, tmp_path / "runs", policy=RunPolicy(max_restarts=1))

    def chief_epochs() -> int:
        series = controller.metrics.scalars.snapshot().get("train/epoch_loss", {})
        return len(series.get("worker:0", ((), ()))[0])

    deadline = time.monotonic() + 120
    while chief_epochs() < 3 and not controller.finished and time.monotonic() < deadline:
        time.sleep(0.05)
    assert chief_epochs() >= 3, controller.message
    events = read_all(controller.bundle.events_file(controller.bundle.plan.tasks[1]))
    script_pid = [e.get("pid") for e in events if e.kind == "started"][-1]
    os.kill(script_pid, signal.SIGKILL)
    wait_done(controller)
    assert controller.state == "finished", controller.message
    assert controller.restarts == 1
    steps, _ = controller.metrics.scalars.snapshot()["train/epoch_loss"]["worker:0"]
    assert list(steps) == list(range(8))  # every epoch once, in order
    log = controller.bundle.log_file(controller.bundle.plan.tasks[0]).read_text()
    assert log.count("Epoch 1/8") == 1  # the second start resumed, not from the first epoch


def test_reattach_and_history_follow_a_script_run(tmp_path: Path) -> None:
    from dtgui.core.runs.records import RunHistory, RunRecord
    from dtgui.launch.start.pipeline import reattach

    plan = script_plan("sleepy_loop", "train.py", args=("12", "0.3"))  # no TensorFlow
    controller = launch_plan(plan, tmp_path / "runs")
    wait_for_scalars(controller, 0.1)
    controller.detach()  # the GUI closes; the tasks keep training
    record = RunRecord.load(controller.bundle.path)
    assert record.state == "running"
    second = reattach(record)
    wait_done(second)
    assert second.state == "finished", second.message
    steps, _ = second.metrics.scalars.snapshot()["train/epoch_loss"]["worker:0"]
    assert list(steps) == list(range(12))  # read again from the start: no gap
    done = RunRecord.load(controller.bundle.path)
    assert done.state == "finished" and done.final_loss is not None
    assert RunHistory(tmp_path / "runs").finished()[0].run_id == record.run_id


def test_parameter_server_script_servers_are_stopped_when_the_chief_ends(tmp_path: Path) -> None:
    model = ScriptModel(str(PROJECTS / "ps_loop"), "train.py")
    plan = Plan(run_name="ps-script", strategy=Strategy.PARAMETER_SERVER, workers=2,
                parameter_servers=1, replicas_per_task=1, steps=5, checkpoint_every=0,
                model=model)
    controller = launch_plan(plan, tmp_path / "runs")
    wait_done(controller)
    assert controller.state == "finished", controller.message
    snap = controller.metrics.snapshot()
    assert snap.tasks["chief:0"].status == "finished"
    assert {snap.tasks[t].status for t in ("worker:0", "worker:1", "ps:0")} == {"stopped"}
    steps, _ = controller.metrics.scalars.snapshot()["loss"]["chief:0"]
    assert list(steps) == [1, 2, 3, 4, 5] and snap.step == 5
    assert live_members(controller.pgids()) == []


def test_tensorboard_files_the_script_writes_where_it_likes_are_followed(tmp_path: Path) -> None:
    """keras.callbacks.TensorBoard() writes to ./logs (in the bundle's project/): its files are
    this task's, told by the writer's process id in their names."""
    model = ScriptModel(str(PROJECTS / "default_logs"), "train.py")
    plan = Plan(run_name="logs", strategy=Strategy.ONE_DEVICE, replicas_per_task=1,
                checkpoint_every=0, model=model)
    controller = launch_plan(plan, tmp_path / "runs")
    wait_done(controller)
    assert controller.state == "finished", controller.message
    steps, _ = controller.metrics.scalars.snapshot()["logs/train/epoch_loss"]["worker:0"]
    assert list(steps) == [0, 1, 2]


def test_a_tutorial_custom_loop_that_only_prints_gets_live_epoch_curves(tmp_path: Path) -> None:
    """TensorFlow's multi-worker custom-loop tutorial (in-memory data): no report(), no
    TensorBoard files, one printed line per epoch. Its numbers are the run's curves, on the
    epoch axis; the run's final loss is the last loss it printed."""
    plan = script_plan("mwm_custom_loop", "main.py", args=("3", "4"), legacy=True)
    controller = launch_plan(plan, tmp_path / "runs")
    wait_for_scalars(controller)  # live: before the run ends
    wait_done(controller)
    assert controller.state == "finished", controller.message
    scalars = controller.metrics.scalars
    shown = scalars.snapshot()
    assert {"accuracy", "train_loss"} <= set(shown)
    steps, losses = shown["train_loss"]["worker:0"]
    assert list(steps) == [0, 1, 2]
    assert set(shown["train_loss"]) == {"worker:0"}  # the main task's, by default
    assert scalars.axes()["train_loss"] == "epoch"
    log = controller.bundle.log_file(plan_task(controller)).read_text()
    printed = [float(line.split("train_loss: ")[1].rstrip(".\n"))
               for line in log.splitlines() if "train_loss: " in line]
    assert len(printed) == 3 and list(losses) == pytest.approx(printed)
    assert controller.final_loss == pytest.approx(printed[-1])
    snap = controller.metrics.snapshot()
    assert (snap.script_progress.unit, snap.script_progress.done) == ("epoch", 3)
    assert snap.epoch == 3
    assert final_loss_of_bundle(controller.bundle.path) == pytest.approx(printed[-1])


def test_a_user_pattern_reads_the_script_s_own_log_format(tmp_path: Path) -> None:
    pattern = r"\[it (?P<step>\d+)\] loss=(?P<loss>\S+) lr=(?P<lr>\S+)"
    model = ScriptModel(str(PROJECTS / "it_lines"), "train.py", patterns=(pattern,))
    plan = Plan(run_name="it-lines", strategy=Strategy.ONE_DEVICE, replicas_per_task=1, steps=80,
                checkpoint_every=0, model=model)
    controller = launch_plan(plan, tmp_path / "runs")
    wait_done(controller, 60)
    assert controller.state == "finished", controller.message
    shown = controller.metrics.scalars.snapshot()
    assert set(shown) == {"loss", "lr"}  # its last line, "done: 0 errors", is prose
    steps, losses = shown["loss"]["worker:0"]
    assert list(steps) == [10, 20, 30, 40, 50, 60, 70, 80]
    assert list(shown["lr"]["worker:0"][1]) == [0.001] * 8
    assert controller.final_loss == pytest.approx(losses[-1])
    progress = controller.metrics.snapshot().script_progress
    assert (progress.unit, progress.done, progress.total) == ("step", 80, 80)


def test_dtgui_run_says_what_a_script_run_is_and_its_progress(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dtgui.cli import main

    out = tmp_path / "bundle"
    pattern = r"\[it (?P<step>\d+)\] loss=(?P<loss>\S+) lr=(?P<lr>\S+)"
    assert main(["export", str(out), "--strategy", "one_device", "--steps", "40",
                      "--script", str(PROJECTS / "it_lines" / "train.py"),
                      "--metric-pattern", pattern, "--env", "MY_FLAG=1"]) == 0
    capsys.readouterr()
    assert main(["run", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("running ") and "your script train.py · Keras 3" in lines[0]
    text = "\n".join(lines)
    assert "Environment: MY_FLAG=1" in text and "DTGUI_STEPS=40" in text
    assert "1 pattern" in text and "do not apply" in text
    assert "100 steps" not in lines[0]
    assert any(line.startswith("final loss ") for line in lines)
    assert lines[-1].startswith("limited by: not measured (your script gives no split: call "
                                "dtgui_worker.report(step, loss)")
