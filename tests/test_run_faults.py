"""Real faults on a run and what is left of it (dtgui.launch.start.run_check, the checkpoint
check, the full-disk stop): every process of a run killed with SIGKILL while it trains and its
newest checkpoint cut short (a power cut during a save), the launcher killed alone, a
launcher killed before it recorded its tasks, a machine that cannot be reached, a disk that
fills. Each is followed by what a user does next (`dtgui runs`, `dtgui resume`, a reattach),
the resumed run's losses equal to an uninterrupted one's, and no process left behind.

The tasks train with the stub child (tests/stub_task.py: no TensorFlow, a loss that is a
function of the step); the same check of a TensorFlow checkpoint's files is in
tests/test_checkpoint_index.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from fakes import wait_for
from runs import live_members, stub_losses

from dtgui.cli.main import main
from dtgui.core.bundles.bundle import render_bundle
from dtgui.core.bundles.checkpoint_files import newest_checkpoint
from dtgui.core.machines.registry import Machine
from dtgui.core.plans.placement import place_local
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.records import MachineRecord, RunRecord, TaskRecord
from dtgui.core.runs.run_state import RunState
from dtgui.launch.controller import LaunchError
from dtgui.launch.drivers import local_target
from dtgui.launch.exec.host import BOOT_ID
from dtgui.launch.runs.history import open_run
from dtgui.launch.runs.run_source import RunSource
from dtgui.launch.start.pipeline import launch_plan, reattach
from dtgui.launch.start.resume import resume_run
from dtgui.launch.start.run_check import Liveness, check_run, settle

FOREVER = 1_000_000
KILL_ALL = [signal.SIGKILL]


def plan(name: str, steps: int = FOREVER, every: int = 10) -> Plan:
    return Plan(run_name=name, strategy=Strategy.MIRRORED, replicas_per_task=2, steps=steps,
                steps_per_epoch=FOREVER, checkpoint_every=every)


def kill_groups(pgids: list[int]) -> None:
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    wait_for(lambda: live_members(pgids) == [], 30, "a killed task's process is left")


def assert_uninterrupted(run: RunSource, last: int) -> None:
    """Steps 1..last, each replica's losses those of a run that never stopped."""
    replicas = run.metrics.snapshot().replica_loss
    assert sorted(replicas) == [0, 1]
    for replica, (steps, losses) in replicas.items():
        assert [int(s) for s in steps] == list(range(1, last + 1))
        np.testing.assert_allclose(losses, stub_losses(range(1, last + 1), replica), rtol=1e-6)


def test_every_process_killed_mid_run_and_mid_save_is_lost_then_resumes_from_the_whole_checkpoint(
        stub_python: Callable[..., str], capsys: pytest.CaptureFixture[str]) -> None:
    first = launch_plan(plan("killed"), targets=[local_target(stub_python())])
    wait_for(lambda: first.metrics.snapshot().step >= 35, 60, "the run did not step")
    assert first.record is not None
    bundle = first.bundle.path
    pgids = list(first.record.pids().values())
    assert pgids and all(t.started for t in first.record.tasks)  # identities recorded
    first.detach()  # the launcher is gone too (a power cut): nothing writes the end
    kill_groups(pgids)
    checkpoints = bundle / "output" / "checkpoints"
    newest = newest_checkpoint(checkpoints).step
    assert newest >= 30
    shard = checkpoints / f"ckpt-{newest}.data-00000-of-00001"  # a save cut short
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    assert RunRecord.load(bundle).state is RunState.RUNNING  # what the record says, wrongly

    assert main(["runs", "show", "killed"]) == 0  # reading it settles it
    out = capsys.readouterr().out
    record = RunRecord.load(bundle)
    reached = record.segments[-1].steps
    assert record.state is RunState.LOST and reached >= 35
    whole = newest - 10
    assert "state: lost: none of its processes is left" in out
    assert f"at step {reached}; its last whole checkpoint is at step {whole}" in record.message
    with pytest.raises(LaunchError, match="Cannot reattach: killed is lost: none of its"):
        reattach(record)  # the Runs page's reattach: nothing to follow, nothing rewritten
    assert RunRecord.load(bundle).state is RunState.LOST

    assert main(["resume", bundle.name, "--steps", str(whole + 20)]) == 0
    out = capsys.readouterr().out
    assert (f"resuming from the checkpoint of step {whole} (the checkpoint of step {newest} "
            f"was skipped: it was cut short (ckpt-{newest}.data-00000-of-00001 holds") in out
    assert "run finished" in out
    record = RunRecord.load(bundle)
    assert [(s.from_step, str(s.state)) for s in record.segments] == [
        (0, "lost"), (whole, "finished")]
    assert_uninterrupted(open_run(record), whole + 20)  # as the dashboard reads it back
    assert live_members(pgids + list(record.pids().values())) == []

    # a launcher killed while it started the tasks, before it recorded them: once it is gone
    # and none of the tasks its record names left a live process, the run is lost
    record.state, record.tasks = RunState.STARTING, []
    record.launcher = f"{os.getpid()}/{Path(BOOT_ID).read_text().strip()}/0"  # not this one
    record.save()
    assert check_run(record).verdict is Liveness.GONE
    record.launcher = ""  # a launch under way (or of an older dtgui): nothing to tell
    assert check_run(record).verdict is Liveness.UNKNOWN
    record.launcher = f"{os.getpid()}/{Path(BOOT_ID).read_text().strip()}/0"
    assert settle(record).verdict is Liveness.GONE and RunRecord.load(bundle).state is \
        RunState.LOST


LAUNCHER = """
import sys
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.launch.drivers import local_target
from dtgui.launch.start.pipeline import launch_plan
plan = Plan(run_name="orphan", strategy=Strategy.MIRRORED, replicas_per_task=2,
            steps=1_000_000, steps_per_epoch=1_000_000, checkpoint_every=10)
controller = launch_plan(plan, targets=[local_target(sys.argv[1])])
print(controller.bundle.path, flush=True)
controller.wait()
"""


@pytest.fixture
def launcher(stub_python: Callable[..., str]) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, stub_python()],
                            stdout=subprocess.PIPE, text=True)
    yield proc
    proc.kill()
    proc.wait()


def test_the_launcher_killed_alone_leaves_its_tasks_training_and_the_run_found_again(
        launcher: subprocess.Popen[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert launcher.stdout is not None
    bundle = Path(launcher.stdout.readline().strip())

    def steps_done() -> int:
        events = bundle / "output" / "events-worker-0.jsonl"
        text = events.read_text() if events.is_file() else ""
        return sum(1 for line in text.splitlines() if '"kind":"steps"' in line)

    wait_for(lambda: RunRecord.load(bundle).tasks and steps_done() >= 2, 60,
             "the launcher's run did not train")
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()
    record = RunRecord.load(bundle)
    saved = record.path.read_bytes()
    assert check_run(record).verdict is Liveness.ALIVE  # its tasks train on (own sessions)
    assert main(["runs", "show", "orphan"]) == 0
    out = capsys.readouterr().out
    assert "state: running" in out and "its processes: alive" in out
    assert record.path.read_bytes() == saved
    with pytest.raises(LaunchError, match="still running: stop it first"):
        resume_run(record)
    pgids = list(record.pids().values())

    # its process group id given to another process (this one's group, another start time)
    # does not count; after a reboot none does; a record without identities counts the id
    impostor = RunRecord.from_dict(record.to_dict())
    for task in impostor.tasks:
        task.pid = os.getpgid(0)
    assert check_run(impostor).verdict is Liveness.GONE
    for task in impostor.tasks:
        task.started = "another-boot/" + task.started.partition("/")[2]
    assert check_run(impostor).verdict is Liveness.GONE
    for task in impostor.tasks:
        task.started = ""
    assert check_run(impostor).verdict is Liveness.ALIVE

    followed = reattach(record)  # found again, followed, stopped as any run
    before = followed.metrics.snapshot().step
    wait_for(lambda: followed.metrics.snapshot().step > before, 60, "it is not followed")
    followed.request_stop()
    assert followed.wait(60) and followed.state is RunState.STOPPED, followed.message
    assert RunRecord.load(bundle).state is RunState.STOPPED
    assert live_members(pgids) == []


def test_a_machine_that_cannot_be_reached_is_unknown_never_lost(tmp_path: Path) -> None:
    bundle = render_bundle(place_local(plan("far")), tmp_path / "far")
    record = RunRecord("far-1", "far", str(bundle.path))
    gone = Machine(name="gone", host="127.0.0.1", port=1, user="nobody")
    record.machines = [MachineRecord("gone", "/nowhere", "python3", "127.0.0.1:1",
                                     gone.to_dict(), kind="ssh")]
    record.tasks = [TaskRecord("worker:0", "gone", pid=4242, started="b/1")]
    record.state = RunState.RUNNING
    record.save()
    saved = record.path.read_bytes()
    check = settle(record)
    assert check.verdict is Liveness.UNKNOWN and "gone cannot be reached" in check.detail
    assert record.path.read_bytes() == saved
    with pytest.raises(LaunchError, match=r"whether it still runs is unknown .*gone cannot "
                                          r"be reached"):
        resume_run(record)
    assert settle(record, reach=False).text == "unknown: gone was not asked"
    assert record.path.read_bytes() == saved


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (root only)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
            capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_disk_that_fills_stops_the_run_with_its_last_whole_checkpoint_then_it_resumes(
        small_disk: Path, stub_python: Callable[..., str],
        capsys: pytest.CaptureFixture[str]) -> None:
    controller = launch_plan(plan("full", every=5), runs_root=small_disk,
                             targets=[local_target(stub_python())])
    wait_for(lambda: controller.metrics.snapshot().step >= 12, 60, "the run did not step")
    filler = small_disk / "filler"
    with open(filler, "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:  # what another program writing there does
            f.write(b"\0" * 65536)
    assert controller.wait(60) and controller.state is RunState.FAILED
    output = controller.bundle.path / "output"
    record = RunRecord.load(controller.bundle.path)
    assert record.state is RunState.FAILED and record.message == controller.message
    assert controller.message.startswith(f"the disk holding {output} is full: training "
                                         "stopped at step ")
    whole = newest_checkpoint(output / "checkpoints").step
    assert whole >= 10 and f"its last whole checkpoint is at step {whole}" in \
        controller.message
    events = [json.loads(line) for line in (output / "events-worker-0.jsonl").read_text(
        ).splitlines() if line.endswith("}")]  # what was written stays readable
    assert any(e["kind"] == "steps" for e in events)
    assert main(["runs", "list"]) == 0  # the command line works on
    capsys.readouterr()
    pgids = list(record.pids().values())
    assert live_members(pgids) == []

    filler.unlink()  # room again: it goes on from its last whole checkpoint
    resumed = resume_run(record, steps=whole + 10)
    assert resumed.wait(60) and resumed.state is RunState.FINISHED, resumed.message
    assert_uninterrupted(resumed, whole + 10)
    assert live_members(pgids + list(record.pids().values())) == []
