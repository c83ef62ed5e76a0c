"""The bundle's output layout is defined once (dtgui.worker.layout): the task wrapper the
executors start, the Slurm task on the nodes, the remote poll script and this machine's reads
all write and read the same files, and this machine's host reads what the remote script
reads. Real processes, real files; nothing is mocked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.plans.placement import place_local
from dtgui.core.plans.plan import Plan
from dtgui.launch.exec.host import LocalHost, TaskRead
from dtgui.launch.exec.local_exec import LocalExecutor
from dtgui.launch.exec.remote_scripts import POLL_SCRIPT, PollOutput, parse_poll
from dtgui.worker import layout
from dtgui.worker.strategies import Strategy

ROOT = Path(__file__).resolve().parent.parent
EVENT = b'{"kind": "started", "task": "worker:0", "time": 1.0}\n'


def bundle_with(tmp_path: Path, script: str) -> Bundle:
    """A bundle directory whose one task runs `script`."""
    plan = place_local(Plan(strategy=Strategy.ONE_DEVICE, replicas_per_task=1))
    bundle = Bundle(tmp_path, plan)
    task = plan.tasks[0]
    bundle.task_script(task).parent.mkdir(parents=True)
    bundle.task_script(task).write_text(script)
    for sub in layout.TASK_DIRS:
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
    return bundle


def task_script(code: int) -> str:
    """Writes an event where the task's events go (the worker's rule), a log line, exits."""
    events = layout.events_name("worker-0")
    return (f"printf '%s\\n' '{EVENT.decode().strip()}' >> output/{events}\n"
            f"echo hello from the task\nexit {code}\n")


def remote_read(directory: Path, reads: list[TaskRead]) -> PollOutput:
    """What the poll script sent to another machine reads of the same directory."""
    args = [str(directory), str(1 << 20)]
    for r in reads:
        args += [r.stem, str(r.pgid), str(r.events_offset), str(r.log_offset)]
    out = subprocess.run(["sh", "-s", "--", *args], input=POLL_SCRIPT.encode(),
                         capture_output=True, check=True, timeout=30).stdout
    return parse_poll(out)


def wait_for_exit_file(bundle: Bundle) -> None:
    deadline = time.monotonic() + 30
    while not bundle.exit_file(bundle.plan.tasks[0]).exists():
        assert time.monotonic() < deadline, "the wrapper wrote no exit file"
        time.sleep(0.05)


def test_the_wrapper_writes_where_the_bundle_and_both_hosts_read(tmp_path: Path) -> None:
    bundle = bundle_with(tmp_path, task_script(3))
    task = bundle.plan.tasks[0]
    host = LocalHost()
    pids = host.start_tasks(str(tmp_path), sys.executable, [task.file_stem])
    wait_for_exit_file(bundle)
    host.reap()
    assert bundle.pid_file(task).read_text().strip() == str(pids[task.file_stem])
    assert bundle.exit_file(task).read_text().strip() == "3"
    reads = [TaskRead(task.file_stem, pids[task.file_stem])]
    here, there = host.read_tasks(str(tmp_path), reads), remote_read(tmp_path, reads)
    for seen in (here, there):
        assert seen.complete and seen.exits == {task.file_stem: 3}
        assert seen.data[(task.file_stem, "ev")] == (0, EVENT)
        assert seen.data[(task.file_stem, "log")] == (0, b"hello from the task\n")
    # from an offset past the end of a replaced file, both say: read it again from the start
    later = [TaskRead(task.file_stem, 0, len(EVENT) + 100, 0)]
    assert host.read_tasks(str(tmp_path), later).truncated == \
        remote_read(tmp_path, later).truncated == {(task.file_stem, "ev"): len(EVENT)}


def test_this_machines_poll_reads_the_files_itself(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """LocalExecutor polls by reading the files and /proc: with no program to be found (an
    empty PATH) it still sees the task's end, exit code, events and log."""
    bundle = bundle_with(tmp_path, task_script(5))
    executor = LocalExecutor(bundle, bundle.plan.tasks, sys.executable)
    executor.start()
    wait_for_exit_file(bundle)
    monkeypatch.setenv("PATH", "")
    deadline = time.monotonic() + 30
    events, lines = b"", list[str]()
    while True:
        poll = executor.poll().tasks["worker:0"]
        events, lines = events + poll.raw_events, lines + poll.log_lines
        if not poll.alive:
            break
        assert time.monotonic() < deadline, "the task never ended"
        time.sleep(0.05)
    executor.reap()
    assert poll.exit_code == 5 and events == EVENT and lines == ["hello from the task"]


def run_slurm_task(tmp_path: Path, extra_env: dict[str, str]) -> subprocess.Popen[bytes]:
    """dtgui_worker.slurm_task as srun starts it (rank 0 of a one-task job)."""
    env = {**os.environ, "SLURM_PROCID": "0", "DTGUI_SLURM_TASKS": "worker:0",
           "DTGUI_SLURM_HOSTS": "127.0.0.1", "SLURM_JOB_ID": "7", "SLURM_TASKS_PER_NODE": "1",
           "PYTHONPATH": str(ROOT), **extra_env}
    return subprocess.Popen([sys.executable, "-m", "dtgui.worker.slurm_task"], cwd=tmp_path,
                            env=env, start_new_session=True)


def test_the_slurm_task_runs_the_same_wrapper_and_a_signal_ends_it_as_signalled(
        tmp_path: Path) -> None:
    bundle = bundle_with(tmp_path, task_script(0))
    task = bundle.plan.tasks[0]
    proc = run_slurm_task(tmp_path, {})
    assert proc.wait(timeout=60) == 0
    seen = LocalHost().read_tasks(str(tmp_path), [TaskRead(task.file_stem)])
    assert seen.exits == {task.file_stem: 0}
    log = seen.data[(task.file_stem, "log")][1]
    assert log.startswith(b"[dtgui] worker:0 is rank 0 of Slurm job 7") and \
        b"hello from the task" in log
    assert bundle.pid_file(task).read_text().strip() == str(proc.pid)  # exec'd: one process
    # a task Slurm stops (time limit, scancel) records the signal, whatever its script says
    bundle.task_script(task).write_text(
        "trap 'exit 0' TERM\ntouch ready\nwhile :; do sleep 0.1; done\n")
    bundle.exit_file(task).unlink()
    proc = run_slurm_task(tmp_path, {})
    deadline = time.monotonic() + 30
    while not (tmp_path / "ready").exists():  # the script has set its trap
        assert time.monotonic() < deadline, "the task did not start"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)  # as Slurm signals every process of the step
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert bundle.exit_file(task).read_text().strip() == str(128 + signal.SIGTERM)
