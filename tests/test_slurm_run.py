"""Runs on a real Slurm (slurmctld + two slurmd + munged on this machine, tests/slurm_cluster.py)
through the one launch pipeline, with this machine as the login node: a MultiWorkerMirrored
run of the built-in loop on two nodes, Stop (running and pending), a task that fails, a job
Slurm refuses, a reattach from the job id, and `dtgui export --slurm` + `dtgui run`.

The run policy cases use the stub training child (tests/stub_task.py) under the real
supervisor; the TensorFlow run is the real thing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import conftest_ssh
import pytest
import remote_python
import runs
import sshhosts
from conftest_ssh import machine, trust
from fakes import GPU_FIXTURES, python_with_fake_gpus, wait_for
from slurm_cluster import SlurmCluster, served_cluster

from dtgui.cli.main import main as cli_main
from dtgui.core.bundles.checkpoint_files import newest_checkpoint
from dtgui.core.machines.registry import MachineRegistry
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.records import RunRecord
from dtgui.core.runs.run_state import RunState
from dtgui.core.scripts.script import ScriptModel
from dtgui.kinds.slurm.driver import cluster_job_target, cluster_target
from dtgui.kinds.slurm.executor import SlurmExecutor
from dtgui.kinds.slurm.job import SlurmDefaults, SlurmJob
from dtgui.kinds.slurm.remote import ask_slurm
from dtgui.launch.controller import LaunchError, RunController
from dtgui.launch.runs.policy import RunPolicy
from dtgui.launch.start.pipeline import launch_plan, reattach
from dtgui.launch.start.resume import resume_run
from dtgui.remote.commands import LocalRunner

ssh_lab, ssh_env, real_keyring = conftest_ssh.ssh_lab, conftest_ssh.ssh_env, conftest_ssh.real_keyring


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    yield from served_cluster()


SCRIPTS = Path(__file__).resolve().parent / "script_projects"


def mwms(steps: int, name: str = "slurm-run", checkpoint_every: int = 0) -> Plan:
    return Plan(run_name=name, strategy=Strategy("multi_worker_mirrored"), workers=2,
                replicas_per_task=1, steps=steps, steps_per_epoch=max(steps // 2, 1),
                checkpoint_every=checkpoint_every)


def started_at(bundle: Path, task: str) -> list[int]:
    """The step each start of `task` resumed from (its `started` events)."""
    lines = (bundle / "output" / f"events-{task.replace(':', '-')}.jsonl").read_text()
    return [event["resumed_from_step"] for event in map(json.loads, lines.splitlines())
            if event.get("kind") == "started"]


def stops_of(bundle: Path, task: str) -> list[tuple[int, bool]]:
    """(step, saved) of each stop `task` reported (its training loop's `stopped_at` event),
    after the last step it had trained."""
    lines = (bundle / "output" / f"events-{task.replace(':', '-')}.jsonl").read_text()
    found, trained = [], 0
    for event in map(json.loads, lines.splitlines()):
        if event.get("kind") == "steps":
            trained = event["first"] + event["count"] - 1
        elif "stopped_at" in event:
            assert event["stopped_at"] == trained, (event, trained)
            found.append((event["stopped_at"], event["saved"]))
    return found


def launch(plan: Plan, root: Path, python: str, **job: Any) -> RunController:
    settings = replace(SlurmJob(nodes=2, tasks_per_node=1, python=python), **job)
    return launch_plan(plan, root, targets=[cluster_target(None, settings)])


def processes_in(directory: Path) -> list[int]:
    """Processes whose working directory is `directory` (a task of the run)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if os.readlink(f"/proc/{entry.name}/cwd") == str(directory):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def nothing_left(slurm: SlurmCluster, controller: RunController, keep: tuple[str, ...] = ()
                 ) -> None:
    job = controller.executors[0].job_id
    wait_for(lambda: job not in slurm.queue(), 60, f"job {job} is still queued")
    wait_for(lambda: not processes_in(controller.bundle.path), 60, "a task process is left")
    assert [j for j in slurm.queue() if j not in keep] == []


def test_ask_slurm_on_the_login_node(slurm: SlurmCluster) -> None:
    facts = ask_slurm(LocalRunner())
    assert facts.problems == [] and facts.version.startswith("22.")
    debug = facts.partition("")
    assert debug is not None and debug.name == "debug" and debug.nodes == 2
    assert debug.cpus == 2 and debug.memory_mb == 4000 and debug.idle_nodes == 2


def test_multi_worker_mirrored_on_two_nodes(slurm: SlurmCluster, tmp_path: Path) -> None:
    controller = launch(mwms(6), tmp_path, sys.executable)
    assert controller.wait(150), controller.metrics.log_lines("worker:0")[-5:]
    assert controller.state is RunState.FINISHED, controller.message
    snap = controller.metrics.snapshot()
    assert sorted(snap.replica_loss) == [0, 1]  # a replica on each node
    assert all(len(ys) == 6 for _, ys in snap.replica_loss.values())
    record = RunRecord.load(controller.bundle.path)
    assert record.machines[0].job_id == controller.executors[0].job_id != ""
    assert record.state is RunState.FINISHED
    assert (controller.bundle.path / "output" / "model" / "model.keras").stat().st_size > 0
    nothing_left(slurm, controller)

    # the same bundle, submitted by hand as its README says (`sbatch job.sbatch` in its
    # directory), trains the same per-replica losses to the last bit
    in_app = [runs.replica_losses(controller.bundle.events_file(t))
              for t in controller.plan.tasks]
    by_hand = tmp_path / "by-hand"
    shutil.copytree(controller.bundle.path, by_hand,
                    ignore=lambda folder, _names: ["output"] if Path(folder) ==
                    controller.bundle.path else [])
    (by_hand / "output" / "logs").mkdir(parents=True)  # as the export leaves it: sbatch logs there
    submitted = subprocess.run(["sbatch", "--parsable", "job.sbatch"], cwd=by_hand,
                               capture_output=True, text=True, timeout=30, env=slurm.env())
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    # followed in the queue, not with `sbatch --wait`: that asks at 2, 10 and 42 s after the
    # submission (then every 32 s), so a job that ends at 12 s was seen ended at 42 s
    wait_for(lambda: job not in slurm.queue(), 150, f"job {job} is still queued")
    ended = slurm.run("scontrol", "show", "job", job).stdout
    job_log = "".join(p.read_text(errors="replace")
                      for p in (by_hand / "output" / "logs").glob("*.log"))
    assert "JobState=COMPLETED" in ended and "ExitCode=0:0" in ended, ended + job_log
    assert [runs.replica_losses(by_hand / controller.bundle.events_file(t).relative_to(
        controller.bundle.path)) for t in controller.plan.tasks] == in_app
    assert all(len(losses) == 6 for losses in in_app)


def test_parameter_server_by_rank(slurm: SlurmCluster, tmp_path: Path,
                                  stub_python: Callable[..., str]) -> None:
    """chief, server and two workers on 2 nodes x 2 tasks; when the chief has finished the
    servers and workers are ended with the job, and the run is finished."""
    plan = Plan(run_name="slurm-ps", strategy=Strategy("parameter_server"), workers=2,
                parameter_servers=1, steps=20, steps_per_epoch=10, checkpoint_every=0)
    # an account: without Slurm's accounting it cannot be checked before submit (said so)
    controller = launch(plan, tmp_path, stub_python(), tasks_per_node=2, account="lab")
    assert [t.task_id for t in controller.plan.tasks] == ["chief:0", "worker:0", "worker:1",
                                                           "ps:0"]
    assert controller.wait(60) and controller.state is RunState.FINISHED, controller.message
    assert "[dtgui] The account 'lab' cannot be checked before submit (Slurm's accounting " \
        "does not answer `sacctmgr` here): Slurm judges it when the job is submitted." in \
        controller.metrics.log_lines("chief:0")
    # each task's log says where it runs: rank, node, address and port
    assert any(line.startswith("[dtgui] ps:0 is rank 3 of Slurm job ") and " on node2, "
               "listening on 127.0.0.1:" in line for line in controller.metrics.log_lines("ps:0"))
    nothing_left(slurm, controller)


def test_stop_cancels_the_job_and_leaves_nothing(slurm: SlurmCluster, tmp_path: Path,
                                                 stub_python: Callable[..., str]) -> None:
    controller = launch(mwms(100000), tmp_path, stub_python(step_seconds=0.1))
    wait_for(lambda: controller.metrics.snapshot().step >= 5, 60, "no steps")
    controller.request_stop()
    assert controller.wait(30)
    assert controller.state is RunState.STOPPED, controller.message
    nothing_left(slurm, controller)


def test_pending_job_says_why_and_stop_cancels_it(slurm: SlurmCluster, tmp_path: Path,
                                                  stub_python: Callable[..., str]) -> None:
    # every core of both nodes, as often as the partition shares a core (OverSubscribe=FORCE:4)
    blockers = tuple(slurm.run("sbatch", "--parsable", "-N2", "--ntasks-per-node=2",
                               f"--chdir={tmp_path}", "--wrap", "sleep 120").stdout.strip()
                     for _ in range(4))
    try:
        controller = launch(mwms(100), tmp_path / "runs", stub_python())
        wait_for(lambda: any("is waiting in the queue (Resources" in line
                             for line in controller.metrics.log_lines("worker:0")), 60,
                 "the queue reason is not shown")
        queued = controller.state
        assert queued is RunState.RUNNING  # queued: not hung, not failed
        assert "is waiting in the queue (Resources)" in controller.message  # the run's view
        controller.request_stop()
        assert controller.wait(30)
        assert controller.state is RunState.STOPPED
        nothing_left(slurm, controller, keep=blockers)
    finally:
        slurm.run("scancel", *blockers)


def test_a_task_that_fails_fails_the_run_with_its_error(slurm: SlurmCluster, tmp_path: Path,
                                                        stub_python: Callable[..., str]) -> None:
    python = stub_python(fail="worker:1=ValueError: the data is broken")
    controller = launch(mwms(200), tmp_path, python)
    assert controller.wait(120)
    ended = time.time()
    assert controller.state is RunState.FAILED
    assert "the data is broken" in controller.message
    failed = [json.loads(line) for line in (controller.bundle.output / "events-worker-1.jsonl")
              .read_text().splitlines() if '"failed"' in line]
    # failed from the task's own failure (seconds on an idle machine, more on a loaded one),
    # not by the hang detector, which waits for events that do not come
    assert ended - failed[0]["t"] < RunPolicy().stale_seconds
    nothing_left(slurm, controller)
    # a node that fails (set DOWN: Slurm ends the job, --no-requeue): the run fails at once,
    # in Slurm's words, with the checkpoint a restart would resume from
    python = stub_python(step_seconds=0.1)
    controller = launch(mwms(100000, "node-fails", checkpoint_every=10), tmp_path, python)
    executor = controller.executors[0]
    assert isinstance(executor, SlurmExecutor)
    wait_for(lambda: executor.checkpoint is not None, 60, "no checkpoint")
    down = time.time()
    try:
        slurm.run("scontrol", "update", "NodeName=node2", "State=DOWN", "Reason=dtgui-test")
        assert controller.wait(120) and controller.state is RunState.FAILED, controller.message
        assert time.time() - down < RunPolicy().stale_seconds  # from Slurm's word, not a hang
        assert f"a node of the Slurm job failed (job {controller.executors[0].job_id}); the " \
            "last checkpoint: output/checkpoints/ckpt-" in controller.message
    finally:  # the test cluster returns a responding node to service (ReturnToService=2)
        slurm.run("scontrol", "update", "NodeName=node2", "State=RESUME")
        wait_for(lambda: {line for line in slurm.run("sinfo", "-h", "-N", "-o", "%N %t")
                          .stdout.splitlines() if line.startswith("node2 ")} == {"node2 idle"},
                 60, "node2 is not idle again")
    nothing_left(slurm, controller)


def test_a_job_that_cannot_run_is_a_clear_error(slurm: SlurmCluster, tmp_path: Path,
                                                stub_python: Callable[..., str]) -> None:
    python = stub_python()
    # what sinfo tells is checked before anything is written, each with what to do
    with pytest.raises(LaunchError, match="no partition 'nosuch': choose one of debug, short"):
        launch(mwms(10), tmp_path, python, partition="nosuch")
    with pytest.raises(LaunchError, match="asks for 3 node\\(s\\) but the partition debug "
                                          "has 2: ask for at most 2"):
        launch_plan(mwms(10, "three"), tmp_path, targets=[cluster_target(None, SlurmJob(
            nodes=3, tasks_per_node=1, python=python))])
    with pytest.raises(LaunchError, match="asks for 1 GPU\\(s\\) per node but the nodes of "
                                          "debug have none: ask for none"):
        launch(mwms(10), tmp_path, python, gpus_per_node=1)
    with pytest.raises(LaunchError, match="The time limit 00:10:00 is over the partition "
                                          "short's 00:05:00: ask for at most that"):
        launch(mwms(10), tmp_path, python, partition="short", time_limit="00:10:00")
    assert list(tmp_path.iterdir()) == []
    # what only sbatch knows: its refusal, in its words, and what to do; the run is
    # recorded as failed
    with pytest.raises(LaunchError, match=r"Slurm refused the job: Invalid feature .*: check "
                                          r"the constraint against the nodes' features"):
        launch(mwms(10), tmp_path, python, constraint="nosuchfeature")
    assert slurm.drained() == []
    (record,) = [RunRecord.load(p) for p in tmp_path.iterdir()]
    assert record.state is RunState.FAILED and "Invalid feature" in record.message


def test_reattach_from_the_job_id(slurm: SlurmCluster, tmp_path: Path,
                                  stub_python: Callable[..., str]) -> None:
    # every node's GPUs on the dashboard while it runs (a real GPU's telemetry replayed)
    python = python_with_fake_gpus(stub_python(step_seconds=0.1), tmp_path)
    controller = launch(mwms(40).with_changes(device_kind="gpu"), tmp_path, python)
    gpus = ["worker:0 gpu0", "worker:1 gpu0"]  # a task a node
    wait_for(lambda: controller.metrics.snapshot().step >= 10 and
             sorted(controller.metrics.snapshot().device_util) == gpus, 60,
             f"no steps, or not every node's GPU: {controller.metrics.snapshot().step} "
             f"{sorted(controller.metrics.snapshot().device_util)}")
    captured = {device["util"] for line in (GPU_FIXTURES / "telemetry-h100-under-load.jsonl"
                                            ).read_text().splitlines()
                for device in json.loads(line)["devices"]}
    for label in gpus:
        assert set(controller.metrics.snapshot().device_util[label][1]) <= captured
    controller.detach()
    assert controller.state is RunState.DETACHED
    again = reattach(RunRecord.load(controller.bundle.path))
    assert again.executors[0].job_id == controller.executors[0].job_id
    assert again.wait(60) and again.state is RunState.FINISHED, again.message
    steps = again.metrics.snapshot().replica_loss[0][0]
    assert list(steps) == list(range(1, 41))  # the whole history, no gap
    nothing_left(slurm, again)


def test_dtgui_run_submits_an_exported_job(slurm: SlurmCluster, tmp_path: Path,
                                           stub_python: Callable[..., str]) -> None:
    out = tmp_path / "bundle"
    python = stub_python()
    export = subprocess.run(
        [sys.executable, "-m", "dtgui.cli.main", "export", str(out), "--strategy",
         "multi_worker_mirrored", "--steps", "20", "--slurm", "local", "--nodes", "2",
         "--python", f"local={python}"], capture_output=True, text=True, timeout=120)
    assert export.returncode == 0, export.stderr
    run = subprocess.run([sys.executable, "-m", "dtgui.cli.main", "run", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "submitted Slurm job" in run.stdout and "run finished" in run.stdout
    assert RunRecord.load(out).machines[0].job_id
    assert slurm.drained() == []


def test_a_restart_resubmits_the_job(slurm: SlurmCluster, tmp_path: Path,
                                     stub_python: Callable[..., str]) -> None:
    """Slurm's warning ahead of the time limit (job.sbatch's --signal=B:USR1@120, sent here as
    Slurm sends it) stops the tasks with a checkpoint at the step they reached, off the
    checkpoint interval; the job reaches its time limit: that is the reason given, with that
    checkpoint; the restart submits the job again and its tasks resume from it."""
    python = stub_python(step_seconds=0.1)
    settings = SlurmJob(nodes=2, tasks_per_node=1, python=python, time_limit="00:05:00")
    controller = launch_plan(mwms(100000, checkpoint_every=10), tmp_path,
                             targets=[cluster_target(None, settings)],
                             policy=RunPolicy(max_restarts=1))
    executor = controller.executors[0]
    assert isinstance(executor, SlurmExecutor)
    first = executor.job_id
    wait_for(lambda: executor.checkpoint is not None, 60, "no checkpoint")
    assert "#SBATCH --signal=B:USR1@120" in (controller.bundle.path / "job.sbatch").read_text()
    warned = slurm.run("scancel", "--batch", "--signal=USR1", first)
    assert warned.returncode == 0, warned.stderr
    wait_for(lambda: stops_of(controller.bundle.path, "worker:0"), 60, "no stop at the warning")
    [(stopped, saved)] = stops_of(controller.bundle.path, "worker:0")
    assert saved and stopped >= 10
    assert not controller.finished  # the job runs on to its limit
    # the time limit, reached now (Slurm rounds the limit to the minute: 00:01:00)
    done = slurm.run("scontrol", "update", f"JobId={first}", "EndTime=now")
    assert done.returncode == 0, done.stderr
    wait_for(lambda: all(len(started_at(controller.bundle.path, task)) == 2
                         for task in ("worker:0", "worker:1")), 60,
             f"not started again: {controller.message}")
    controller.request_stop()
    assert controller.wait(30) and controller.state is RunState.STOPPED, controller.message
    assert controller.restarts == 1
    said = [line for line in controller.metrics.log_lines("worker:0") + controller.metrics.
            log_lines("worker:1") if "restarting every task from the last checkpoint" in line]
    assert said and f"time limit 00:01:00 reached (Slurm job {first}); the last checkpoint: " \
        "output/checkpoints/ckpt-" in said[0], said
    second = RunRecord.load(controller.bundle.path).machines[0].job_id
    assert second != first  # submitted again, and the record follows the new job
    logs = sorted(p.name for p in (controller.bundle.output / "logs").glob("slurm-*.log"))
    assert logs == sorted([f"slurm-{first}.log", f"slurm-{second}.log"])
    (_, resumed) = started_at(controller.bundle.path, "worker:0")
    assert resumed == stopped  # from the checkpoint saved at the warning
    assert started_at(controller.bundle.path, "worker:1") == [0, resumed]
    assert f"(step {resumed})" in said[0]  # the checkpoint named is the one resumed from
    nothing_left(slurm, controller)


def test_a_job_its_time_limit_ended_is_resumed(slurm: SlurmCluster, tmp_path: Path,
                                               stub_python: Callable[..., str]) -> None:
    """The time limit ends the job (no restart allowed): the run fails with its checkpoint;
    `resume_run` submits the job again in the run's directory, its tasks resume from the
    checkpoint and train on to the steps asked, in the same run."""
    settings = SlurmJob(nodes=2, tasks_per_node=1, python=stub_python(step_seconds=0.1),
                        time_limit="00:05:00")
    first = launch_plan(mwms(100000, "timed-out", checkpoint_every=10), tmp_path,
                        targets=[cluster_target(None, settings)])
    executor = first.executors[0]
    assert isinstance(executor, SlurmExecutor)
    wait_for(lambda: executor.checkpoint is not None, 60, "no checkpoint")
    assert slurm.run("scontrol", "update", f"JobId={executor.job_id}",
                     "EndTime=now").returncode == 0
    assert first.wait(60) and first.state is RunState.FAILED, first.message
    assert "time limit" in first.message
    record = RunRecord.load(first.bundle.path)
    at = newest_checkpoint(first.bundle.output / "checkpoints").step
    second = resume_run(record, steps=at + 20)
    assert second.wait(120) and second.state is RunState.FINISHED, second.message
    assert started_at(first.bundle.path, "worker:0")[-1] == at
    assert started_at(first.bundle.path, "worker:1")[-1] == at
    for rid in (0, 1):  # every step once, its losses those an uninterrupted run has there
        xs, ys = second.metrics.snapshot().replica_loss[rid]
        assert xs.tolist()[-20:] == list(range(at + 1, at + 21))
        assert xs.tolist() == sorted(set(xs.tolist()))
        assert ys.tolist() == pytest.approx(runs.stub_losses(xs.tolist(), rid), abs=1e-6)
    record = RunRecord.load(first.bundle.path)
    assert [(s.from_step, s.state) for s in record.segments] == [
        (0, RunState.FAILED), (at, RunState.FINISHED)]
    assert record.machines[0].job_id == second.executors[0].job_id != executor.job_id
    nothing_left(slurm, second)


def test_ctrl_c_in_dtgui_run_cancels_the_job(slurm: SlurmCluster, tmp_path: Path,
                                             stub_python: Callable[..., str]) -> None:
    out = tmp_path / "bundle"
    export = subprocess.run(
        [sys.executable, "-m", "dtgui.cli.main", "export", str(out), "--strategy",
         "multi_worker_mirrored", "--steps", "100000", "--slurm", "local",
         "--python", f"local={stub_python(step_seconds=0.1)}"],
        capture_output=True, text=True, timeout=120)
    assert export.returncode == 0, export.stderr
    run = subprocess.Popen([sys.executable, "-m", "dtgui.cli.main", "run", str(out)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert run.stdout is not None
        for line in run.stdout:
            if line.startswith("step "):
                break
        run.send_signal(signal.SIGINT)
        rest = run.communicate(timeout=60)[0]
    finally:
        run.kill()
    assert run.returncode == 130, rest
    assert "run stopped" in rest
    assert slurm.drained() == []
    # scancel: each task saved at the step it reached (the chief's checkpoint)
    [(stopped, saved)] = stops_of(out, "worker:0")
    assert saved and newest_checkpoint(out / "output/checkpoints").step == stopped
    wait_for(lambda: not processes_in(out), 60, "a task process is left")


def test_a_users_script_on_two_nodes(slurm: SlurmCluster, tmp_path: Path) -> None:
    """The user's own training script, one task a node, its curves live from the
    TensorBoard files it writes (the script needs no TensorFlow)."""
    model = ScriptModel(str(SCRIPTS / "sleepy_loop"), "train.py", ("6", "0.4"))
    controller = launch(mwms(10, "slurm-script").with_changes(model=model), tmp_path,
                        sys.executable)
    deadline = time.monotonic() + 60
    while not controller.metrics.scalars.tags():  # live: the first curve before the end
        assert not controller.wait(0.2), (controller.message,
                                          controller.metrics.log_lines("worker:0")[-5:])
        assert time.monotonic() < deadline, "no curve from the script"
    assert controller.wait(60) and controller.state is RunState.FINISHED, controller.message
    steps, losses = controller.metrics.scalars.snapshot()["train/epoch_loss"]["worker:0"]
    assert list(steps) == [0, 1, 2, 3, 4, 5] and losses[-1] == pytest.approx(1 / 6)
    assert any("on node2" in line for line in controller.metrics.log_lines("worker:1"))
    nothing_left(slurm, controller)


@pytest.fixture
def login_node(slurm: SlurmCluster, ssh_lab: sshhosts.SshLab) -> Iterator[sshhosts.Host]:
    """An SSH test host as the cluster's login node: Slurm's commands there read the default
    /etc/slurm/slurm.conf, which names the controller at an address the host reaches."""
    conf = Path("/etc/slurm/slurm.conf")
    if conf.exists():
        pytest.skip(f"{conf} exists: this machine has a Slurm of its own")
    address = f"{ssh_lab.subnet}.1" if ssh_lab.subnet else "127.0.0.1"
    text = slurm.conf.read_text()
    conf.write_text(text.replace("(127.0.0.1)", f"({address})", 1))
    try:
        yield ssh_lab.hosts[0]
    finally:
        conf.unlink(missing_ok=True)


def test_a_cluster_reached_over_ssh(slurm: SlurmCluster, ssh_env: Path, login_node: sshhosts.Host,
                                    ssh_lab: sshhosts.SshLab, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Registered by its login node: the bundle goes to the shared filesystem over SFTP, the
    job is submitted and followed there, its events mirrored here; Stop cancels it."""
    trust(login_node)
    python = runs.stub_python(python=remote_python.python_for(), step_seconds=0.05)
    cluster = machine(ssh_lab, login_node, python=python,
                      kind="slurm",
                      settings=SlurmDefaults(partition="debug", shared_dir="cluster-runs"))
    controller = launch_plan(mwms(40), tmp_path, targets=[
        cluster_job_target(cluster, nodes=2, tasks_per_node=1)])
    assert controller.record is not None
    run_dir = controller.record.machines[0].dir
    assert run_dir.startswith(str(ssh_lab.home / "cluster-runs"))
    assert controller.wait(60) and controller.state is RunState.FINISHED, (
        controller.message, controller.metrics.log_lines("worker:0")[-8:])
    snap = controller.metrics.snapshot()
    assert sorted(snap.replica_loss) == [0, 1]
    assert (controller.bundle.output / "events-worker-1.jsonl").stat().st_size > 0
    assert RunRecord.load(controller.bundle.path).machines[0].job_id
    assert slurm.drained() == []
    # Stop over SSH: scancel on the login node; nothing left in the queue or on the nodes
    endless = launch_plan(mwms(100000, "endless"), tmp_path, targets=[
        cluster_job_target(cluster, nodes=2, tasks_per_node=1)])
    wait_for(lambda: endless.metrics.snapshot().step >= 5, 60, "no steps over SSH")
    endless.request_stop()
    assert endless.wait(30) and endless.state is RunState.STOPPED, endless.message
    job = endless.executors[0].job_id
    wait_for(lambda: job not in slurm.queue(), 60, f"job {job} is still queued")
    wait_for(lambda: not processes_in(Path(endless.executors[0].directory)), 60,
             "a task process is left")
    # a job sbatch refuses leaves nothing on the shared filesystem, nor in the queue
    shared = ssh_lab.home / "cluster-runs"
    before = sorted(shared.iterdir())
    with pytest.raises(LaunchError, match="Slurm refused the job: Invalid feature"):
        launch_plan(mwms(10, "refused"), tmp_path, targets=[
            cluster_job_target(cluster, nodes=2, tasks_per_node=1, constraint="nosuchfeature")])
    assert sorted(shared.iterdir()) == before and slurm.drained() == []
    # dtgui export --slurm CLUSTER, then dtgui run: over SSH to the registered login node
    registry = MachineRegistry()
    registry.add(cluster)
    registry.save()
    out = tmp_path / "exported"
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        assert cli_main(["export", str(out), "--strategy", "multi_worker_mirrored",
                         "--steps", "20", "--slurm", cluster.name, "--nodes", "2"]) == 0
        assert cli_main(["run", str(out)]) == 0
        # it ends with what limited it, as the dashboard's verdict says it
        assert capsys.readouterr().out.splitlines()[-1].startswith("limited by: ")
    finally:
        signal.signal(signal.SIGINT, handlers[0])
        signal.signal(signal.SIGTERM, handlers[1])
    record = RunRecord.load(out)
    assert record.machines[0].job_id and record.machines[0].dir.startswith(
        str(ssh_lab.home / "cluster-runs"))
    assert (out / "output" / "events-worker-1.jsonl").stat().st_size > 0  # mirrored here
