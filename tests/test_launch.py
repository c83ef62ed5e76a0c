"""The app runs what it exports: real bundles, real processes, real signals. The exported
bundle trains with TensorFlow; the run policy (stop, crash, hang) is tested with the bundle's
real supervisor over a stub training child (tests/stub_task.py)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest
from fakes import wait_for
from runs import live_members, replica_losses

from dtgui.cli.main import main
from dtgui.core.measure.profile_answers import (
    WRITTEN_MESSAGE,
    failed,
    silent_message,
    unasked_message,
)
from dtgui.core.plans.placement import place_local
from dtgui.core.plans.plan import Plan, profile_refusal, validate
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.records import RunRecord
from dtgui.core.runs.run_state import RunState
from dtgui.core.scripts.script import ScriptModel
from dtgui.launch.controller import RunController
from dtgui.launch.drivers import local_target
from dtgui.launch.exec.executor import Executor
from dtgui.launch.runs.profile_ask import AskedRun, request_profile
from dtgui.launch.start.pipeline import LaunchError, launch_plan, reattach
from dtgui.launch.start.resume import resume_run
from dtgui.worker.profile_request import REQUEST_NAME
from dtgui.worker.stop_request import STOPPED_EXIT

ROOT = Path(__file__).resolve().parent.parent


def wait_done(controller: RunController, timeout: float = 240) -> None:
    assert controller.wait(timeout), "the run did not end in time"


@pytest.mark.slow
def test_exported_bundle_reproduces_the_in_app_run_bit_for_bit(tmp_path: Path) -> None:
    """Mirrored on two replicas in the app and, side by side, exported by the command line
    and run by hand with `bash run.sh` and plain python. (`dtgui run` of an exported bundle, with its
    progress, is tested with the installed package: tests/test_packaging.py.) The app's run
    trains to its checkpoint at step 4 and is then resumed to step 8 (`resume_run`): the
    same run, its curves without a gap or a step twice, every loss the uninterrupted run's."""
    plan = Plan(run_name="repro", strategy=Strategy.MIRRORED, replicas_per_task=2, steps=4,
                steps_per_epoch=4, checkpoint_every=4, seed=1234)
    # Export the same plan with the command line and run it by hand with plain python while
    # the app runs it: two independent processes, each starting TensorFlow at once.
    out = tmp_path / "exported"
    subprocess.run(
        [sys.executable, "-m", "dtgui", "export", str(out), "--strategy", "mirrored",
         "--replicas", "2", "--steps", "8", "--steps-per-epoch", "4",
         "--checkpoint-every", "0", "--seed", "1234", "--run-name", "repro"],
        check=True, cwd=ROOT,
    )
    env = {**os.environ, "PYTHON": sys.executable}
    by_hand_run = subprocess.Popen(["bash", str(out / "run.sh")], env=env, text=True, cwd="/",
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        first = launch_plan(plan, tmp_path / "runs")
        wait_done(first)
        assert first.state == "finished" and first.record is not None, first.message
        controller = resume_run(first.record, steps=8)
        wait_done(controller)
        output, _ = by_hand_run.communicate(timeout=300)
    finally:
        if by_hand_run.poll() is None:
            by_hand_run.terminate()
            by_hand_run.wait(30)
    assert controller.state == "finished", controller.message
    in_app = replica_losses(controller.bundle.events_file(controller.bundle.plan.tasks[0]))
    assert by_hand_run.returncode == 0, output
    by_hand = replica_losses(out / "output" / "events-worker-0.jsonl")

    assert len(in_app) == 8 and all(len(step) == 2 for step in in_app)
    assert by_hand == in_app  # bit-identical floats, every replica, every step
    assert controller.bundle.path == first.bundle.path  # the same run
    snap = controller.metrics.snapshot()
    for rid in (0, 1):
        assert [int(x) for x in snap.replica_loss[rid][0]] == list(range(1, 9))
    record = RunRecord.load(first.bundle.path)
    assert [(s.from_step, s.steps, str(s.state)) for s in record.segments] == [
        (0, 4, "finished"), (4, 8, "finished")]


def stepping(controller: RunController, steps: int = 3) -> None:
    wait_for(lambda: controller.metrics.snapshot().step >= steps or controller.finished, 60,
             f"the run did not start stepping: {controller.metrics.log_lines('worker:0')}")
    assert not controller.finished, controller.message


def nothing_left(controller: RunController) -> None:
    wait_for(lambda: not live_members(controller.pgids()), 60,
             f"left running: {live_members(controller.pgids())}")


def test_stop_leaves_no_process_behind(tmp_path: Path,
                                       stub_python: Callable[..., str]) -> None:
    plan = Plan(run_name="stop", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                replicas_per_task=1, steps=100000, checkpoint_every=0)
    controller = launch_plan(plan, tmp_path / "runs", targets=[local_target(stub_python())])
    stepping(controller)
    started = time.monotonic()
    controller.request_stop()
    wait_done(controller)
    # Ended by the tasks themselves on SIGTERM, not by the SIGKILL that follows the save grace:
    # each stopped at the step it reached and exited as stopped, before that grace was out.
    assert time.monotonic() - started < controller.policy.save_grace
    assert controller.state == "stopped"
    nothing_left(controller)
    tasks = controller.metrics.snapshot().tasks
    states = {t: s.status for t, s in tasks.items()}
    assert set(states.values()) == {"stopped"}, states
    assert {t: s.exit_code for t, s in tasks.items()} == {t: STOPPED_EXIT for t in tasks}


def test_a_stop_asked_by_another_dtgui_following_the_run_is_a_stop_for_both(
        tmp_path: Path, stub_python: Callable[..., str]) -> None:
    """`dtgui run` follows a run the app reattached and stops: both, and run.json, say it was
    stopped by the user with its checkpoint (not a SIGTERM from outside dtgui)."""
    plan = Plan(run_name="two-followers", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                replicas_per_task=1, steps=100000, checkpoint_every=0)
    cli = launch_plan(plan, tmp_path / "runs", targets=[local_target(stub_python())])
    stepping(cli)
    assert cli.record is not None
    gui = reattach(RunRecord.load(Path(cli.record.bundle)))
    stepping(gui)
    late = RunRecord.load(Path(cli.record.bundle))  # a third follower, still running
    gui.request_stop()
    wait_done(gui)
    wait_done(cli)
    for controller in (gui, cli):
        assert controller.state == "stopped", controller.message
        assert controller.message == "stopped by the user"
        tasks = controller.metrics.snapshot().tasks
        assert {t: s.status for t, s in tasks.items()} == {"worker:0": "stopped",
                                                           "worker:1": "stopped"}
    record = RunRecord.load(Path(cli.record.bundle))
    assert (record.state, record.message) == ("stopped", "stopped by the user")
    # a follower that would record a failure now keeps the stop written (RunController)
    assert late.recorded_end() == ("stopped", "stopped by the user")
    nothing_left(cli)


def test_a_finished_parameter_server_run_followed_twice_is_finished_for_both(
        tmp_path: Path, stub_python: Callable[..., str]) -> None:
    """The coordinator finishes; one follower ends the servers, the other sees them end by
    SIGTERM: both, and run.json, say finished, and that the servers were ended after it."""
    plan = Plan(run_name="ps-followers", strategy=Strategy.PARAMETER_SERVER, workers=2,
                parameter_servers=1, steps=150, checkpoint_every=0)
    cli = launch_plan(plan, tmp_path / "runs", targets=[local_target(stub_python())])
    assert cli.record is not None
    gui = reattach(RunRecord.load(Path(cli.record.bundle)))
    gui.follow_closely(False)  # polled less often: the other one most likely ends the servers
    wait_done(cli)
    wait_done(gui)
    said = "training finished; the servers (ps:0, worker:0, worker:1) were ended after it"
    for controller in (gui, cli):
        assert controller.state == "finished", controller.message
        assert controller.message.startswith(said)
        tasks = controller.metrics.snapshot().tasks
        assert {t: s.status for t, s in tasks.items()} == {
            "chief:0": "finished", "ps:0": "stopped", "worker:0": "stopped",
            "worker:1": "stopped"}
    record = RunRecord.load(Path(cli.record.bundle))
    assert record.state == "finished" and record.message.startswith(said)
    nothing_left(cli)


def test_a_crashing_worker_fails_the_run_with_its_error_and_stops_the_rest(
    tmp_path: Path, stub_python: Callable[..., str]
) -> None:
    plan = Plan(run_name="crash", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                replicas_per_task=1, steps=100000, checkpoint_every=0)
    python = stub_python(fail="worker:1=disk full while reading shard 1")
    controller = launch_plan(plan, tmp_path / "runs", targets=[local_target(python)])
    wait_done(controller, 60)
    assert controller.state == "failed"
    assert "disk full while reading shard 1" in controller.message
    snap = controller.metrics.snapshot()
    assert snap.tasks["worker:1"].status == "failed"
    nothing_left(controller)


def test_a_port_in_use_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        plan = place_local(Plan(strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2, replicas_per_task=1),
                           ports=[port, port + 1 if port < 65535 else port - 1])
        with pytest.raises(LaunchError, match=f"Port {port} .* in use"):
            launch_plan(plan, tmp_path / "runs")
    assert not list((tmp_path / "runs").glob("*/output/pids/*.pid"))


def test_a_stopped_local_task_is_ended_by_sigterm_not_killed(
        tmp_path: Path, stub_python: Callable[..., str]) -> None:
    """A task frozen with SIGSTOP is seen as hung; the run's end sends SIGTERM and SIGCONT, so
    the task acts on SIGTERM (its training process saves where it is and says "stopped at
    step N") within the grace instead of being SIGKILLed after it."""
    plan = Plan(run_name="frozen", strategy=Strategy.ONE_DEVICE, replicas_per_task=1, steps=1_000_000,
                checkpoint_every=0)
    controller = launch_plan(plan, tmp_path / "runs", targets=[local_target(stub_python())])
    stepping(controller)
    (pgid,) = controller.pgids()
    os.killpg(pgid, signal.SIGSTOP)
    wait_done(controller, 60)
    assert controller.state == "failed" and "hung" in controller.message, controller.message
    task = controller.bundle.plan.tasks[0]
    events = [json.loads(line) for line in
              controller.bundle.events_file(task).read_text().splitlines()]
    messages = [e.get("message", "") for e in events if e["kind"] == "log"]
    assert any(m.startswith("stopped at step ") for m in messages), messages[-5:]
    exit_file = controller.bundle.output / "pids" / f"{task.file_stem}.exit"
    assert exit_file.read_text().strip() == "143"
    nothing_left(controller)


def test_a_profile_asked_gets_a_clear_answer_and_leaves_the_run_unharmed(
        tmp_path: Path, stub_python: Callable[..., str],
        capsys: pytest.CaptureFixture[str]) -> None:
    """The stand-in tasks take no profile request (the supervisor and the task wrapper ignore
    its signal): the answer names every task that did not answer in time, and the run goes
    on; own scripts are refused with their reason; an ended run says so."""
    plan = Plan(strategy=Strategy.MIRRORED, model=ScriptModel("/p", "train.py"),
                profile_steps=(1, 2))
    # the same reason for the plan's profile steps and a profile asked while it runs
    assert profile_refusal(plan) and profile_refusal(plan) in " ".join(validate(plan))
    for strategy in (Strategy.MULTI_WORKER_MIRRORED, Strategy.PARAMETER_SERVER):
        assert profile_refusal(Plan(strategy=strategy, workers=2)) == ""
    plan = Plan(run_name="profile", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                replicas_per_task=1, steps=100000, checkpoint_every=0)
    controller = launch_plan(plan, tmp_path / "runs", targets=[local_target(stub_python())])
    stepping(controller)
    said: list[str] = []
    assert controller.request_profile(0) == "no profile: give 1 to 1000 steps"
    answer = controller.request_profile(20, limit=1.0, said=said.append)
    assert answer == ("no profile: worker:0, worker:1 did not start the capture within 1 s "
                      "(the run goes on)") and said == []
    assert (controller.output_dir / REQUEST_NAME).read_text() == "20\n"
    # the same from the command line, which follows the run again for the time it asks
    folder = str(controller.output_dir.parent)
    assert main(["profile", folder, "--steps", "5", "--limit", "1"]) == 1
    assert capsys.readouterr().err == ("dtgui profile: no profile: worker:0, worker:1 did not "
                                       "start the capture within 1 s (the run goes on)\n")
    for bad in ("0", "-3", "5000"):  # a refusal, said before anything is sent
        assert main(["profile", folder, "--steps", bad]) == 2
        assert capsys.readouterr().err == "dtgui profile: no profile: give 1 to 1000 steps\n"
    assert (controller.output_dir / REQUEST_NAME).read_text() == "5\n"
    seen = controller.metrics.snapshot().step
    wait_for(lambda: controller.metrics.snapshot().step > seen, 60, "the run stopped training")
    assert controller.state == "running"
    controller.request_stop()
    wait_done(controller)
    assert controller.state == "stopped"
    assert controller.request_profile(20) == "no profile: the run has ended"
    assert main(["profile", folder]) == 2
    assert capsys.readouterr().err == "dtgui profile: no profile: the run has ended (stopped)\n"


class _AnsweringRun:
    """A running run whose tasks answer a profile's signal with `answers` (their log lines,
    as the dashboard reads them)."""

    def __init__(self, answers: list[str]) -> None:
        self.finished, self.state = False, RunState.RUNNING
        self.plan = Plan(strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2)
        self.training_tasks = ["worker:0", "worker:1"]
        self.executors: list[Executor] = []
        self.answers, self.lines = answers, {t: ["[info] step 1300"] for t in self.training_tasks}
        self.metrics = self

    def read_through(self) -> bool:
        return True

    def log_lines_since(self, task: str, seen: int) -> tuple[list[str], int]:
        return self.lines[task][seen:], len(self.lines[task])

    def signal_tasks(self, sig: int, tasks: set[str]) -> None:
        for task in tasks:
            self.lines[task] += self.answers


def test_a_profile_asked_during_a_capture_or_cut_by_the_runs_end_says_so() -> None:
    """A task that declines the request (a capture under way) is the answer at once, a
    refusal, not a silence; a capture the run's end cuts short says how many steps it keeps."""
    busy = _AnsweringRun(["[warning] profile: 20 steps asked while steps 2226-2825 are being "
                          "captured: not captured again"])
    answer = request_profile(cast(AskedRun, busy), 20, limit=600)
    assert answer == ("no profile: steps 2226-2825 are being captured (ask again once it is "
                      "written)") and not failed(answer)
    cut = _AnsweringRun(["[info] profile: capturing steps 1402-1500 (asked while training)",
                         "[info] profile: steps 1402-1500 captured in /r/output/tensorboard/"
                         "worker-0/plugins/profile (starting the profiler took 0.2 s)"])
    said: list[str] = []
    assert request_profile(cast(AskedRun, cut), 200, limit=600, said=said.append) \
        == WRITTEN_MESSAGE
    assert said == ["profiling steps 1402\u20131500\u2026 (the run ends at 1500: 99 of the 200 "
                    "asked)"]
    # what the command line exits 1 for: no answer, a machine not reached
    assert failed(silent_message({"worker:1"}, "write the trace", 120))
    assert failed(unasked_message(["node2: refused"]))
    assert not failed("no profile: the run has ended")


def test_dtgui_profile_says_the_command_that_reads_the_traces_with_their_absolute_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The run named by a relative folder, as `dtgui run` of a bundle here records it: the
    hint is a command line's, on the absolute folder (a run that answers stands in)."""
    from dtgui.launch.start import pipeline

    class Answering:
        def request_profile(self, steps: int, limit: float,
                            said: Callable[[str], None]) -> str:
            said("profiling steps 11\u201330\u2026")
            return WRITTEN_MESSAGE

        def detach(self) -> None:
            pass

    monkeypatch.chdir(tmp_path)
    RunRecord("r1", "here", "here", "multi_worker_mirrored", state=RunState.RUNNING).save()
    monkeypatch.setattr(pipeline, "reattach", lambda record: Answering())
    assert main(["profile", "here"]) == 0
    traces = tmp_path.resolve() / "here" / "output" / "tensorboard"
    assert capsys.readouterr().out.splitlines() == [
        "profiling steps 11\u201330\u2026", f"profile written: {traces}",
        f"read it in TensorBoard's Profile tab: tensorboard --logdir {traces} "
        "(the dtgui[profile] extra)"]
