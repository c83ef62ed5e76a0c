"""The headless run watcher: the failure policy holds while dtgui is closed.

Real processes: a MultiWorkerMirrored run on this machine (2 worker processes, one replica
each; each task is the bundle's real supervisor over a stub training child, tests/stub_task.py:
the policy, not TensorFlow, is under test), detached as the GUI does on *Keep training*, then
watched by a real `python -m dtgui.launch.start.watcher` process; real signals (kill -9 of a worker,
SIGTERM to the watcher). Other tests use `sleep` processes as tasks: the watcher must never
kill those.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import conftest_ssh
import pytest
import remote_python
import sshhosts
from conftest_ssh import machine
from fakes import wait_for
from runs import live_members

from dtgui.core.bundles.bundle import render_bundle
from dtgui.core.events import STEP_KINDS, read_all, step_rows
from dtgui.core.machines.registry import Machine
from dtgui.core.plans.placement import assign, place_local
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.records import MachineRecord, RunRecord, TaskRecord
from dtgui.core.runs.run_state import RunState
from dtgui.core.settings import config_dir, data_dir, runs_dir
from dtgui.launch.controller import RunController
from dtgui.launch.exec.local_exec import LocalExecutor
from dtgui.launch.start.pipeline import launch_plan, reattach
from dtgui.launch.start.watcher import (
    LOG_NAME,
    PID_NAME,
    is_watcher,
    start_watcher,
    stop_watcher,
    watcher_pid,
)
from dtgui.launch.targets import Target
from dtgui.remote.connector import Connector

FOREVER = 1_000_000


def log_of(run_dir: Path) -> str:
    path = run_dir / LOG_NAME
    return path.read_text(errors="replace") if path.exists() else ""


def steps_written(run_dir: Path, task: str = "worker-0") -> int:
    steps = [int(rows.steps[-1]) for e in read_all(run_dir / "output" / f"events-{task}.jsonl")
             if e.kind in STEP_KINDS and (rows := step_rows(e.data)) is not None]
    return max(steps, default=0)


def reap(controller: RunController) -> None:
    """The tasks were this test process's children: collect them (no zombies)."""
    for ex in controller.executors:
        if isinstance(ex, LocalExecutor):
            for proc in ex.procs.values():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)


def kill_all(pgids: list[int]) -> None:
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def files_holding(needle: bytes, *roots: Path) -> list[str]:
    found = []
    for root in roots:
        for path in root.rglob("*"):
            with contextlib.suppress(OSError):
                if path.is_file() and needle in path.read_bytes():
                    found.append(str(path))
    return found


def launch_detached(name: str, python: str, checkpoint_every: int = 0,
                    min_step: int = 3) -> tuple[RunController, Path, list[int]]:
    """A 2-worker MultiWorkerMirrored run on this machine (its tasks run with `python`),
    stepping, then detached (the GUI closed with *Keep training*)."""
    plan = Plan(run_name=name, strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                replicas_per_task=1, steps=FOREVER, steps_per_epoch=10,
                checkpoint_every=checkpoint_every, seed=3)
    controller = launch_plan(plan, runs_dir(), targets=[Target(python=python)])
    assert controller.record is not None
    pgids = list(controller.record.pids().values())
    try:
        wait_for(lambda: controller.metrics.snapshot().step >= min_step, 60,
                 f"the run did not start stepping: {controller.metrics.log_lines('worker:0')}")
    except BaseException:
        controller.request_stop()
        controller.wait(30)
        raise
    controller.detach()
    return controller, controller.bundle.path, pgids


# -- runs of the bundle's supervisor over a stub training child ------------------------------
def test_a_killed_worker_fails_the_detached_run_and_nothing_is_left(
        stub_python: Callable[..., str]) -> None:
    controller, run_dir, pgids = launch_detached("watched-kill", stub_python())
    token = "watcher-secret-" + secrets.token_hex(16)
    try:
        pid = start_watcher(RunRecord.load(run_dir), {"h9": {"password": token}}, 0)
        assert watcher_pid(run_dir) == pid
        wait_for(lambda: "watching run" in log_of(run_dir), 60,
                 f"the watcher did not attach: {log_of(run_dir)}")
        victim = RunRecord.load(run_dir).pids()["worker:1"]
        killed = time.monotonic()
        os.killpg(victim, signal.SIGKILL)
        failed = wait_for(lambda: RunRecord.load(run_dir).state == "failed", 60,
                          f"the record does not say failed: {log_of(run_dir)}")
        gone = wait_for(lambda: not live_members(pgids), 60,
                        f"left running: {live_members(pgids)}")
        wait_for(lambda: not is_watcher(pid, run_dir), 60, "the watcher did not exit")
        print(f"kill -9 -> record failed {failed:.1f} s, every process gone "
              f"{time.monotonic() - killed:.1f} s after the kill")
        del gone
    finally:
        stop_watcher(run_dir)
        kill_all(pgids)
        reap(controller)
    record = RunRecord.load(run_dir)
    assert record.message.startswith("worker:1 failed"), record.message
    assert "killed" in record.message and record.ended is not None
    assert not (run_dir / PID_NAME).exists()
    assert "the run ended: failed" in log_of(run_dir)
    assert token not in log_of(run_dir)


def test_sigterm_hands_the_run_back_training_goes_on_and_secrets_stay_in_memory(
        isolated_dirs: Path, tmp_path: Path, stub_python: Callable[..., str]) -> None:
    controller, run_dir, pgids = launch_detached("watched-handback", stub_python())
    token = "watcher-secret-" + secrets.token_hex(16)
    second: RunController | None = None
    try:
        pid = start_watcher(RunRecord.load(run_dir), {"h9": {"password": token,
                                                             "passphrase": token + "pp"}}, 2)
        wait_for(lambda: "watching run" in log_of(run_dir), 60,
                 f"the watcher did not attach: {log_of(run_dir)}")
        for what in ("cmdline", "environ"):
            assert token.encode() not in Path(f"/proc/{pid}/{what}").read_bytes(), what
        assert "--max-restarts 2" in " ".join(Path(f"/proc/{pid}/cmdline").read_bytes()
                                             .decode().split("\0"))
        assert "secrets given for 1 machine(s)" in log_of(run_dir)

        started = time.monotonic()
        assert stop_watcher(RunRecord.load(run_dir)) is True
        took = time.monotonic() - started
        assert not is_watcher(pid, run_dir) and watcher_pid(run_dir) is None
        assert not (run_dir / PID_NAME).exists()
        assert "SIGTERM: detached" in log_of(run_dir)
        record = RunRecord.load(run_dir)
        assert record.state == "running" and len(live_members(pgids)) > 0

        before = steps_written(run_dir)  # nobody watches now: training goes on
        wait_for(lambda: steps_written(run_dir) >= before + 5, 60, "training did not go on")
        second = reattach(record)  # the GUI takes the run back
        wait_for(lambda: second.metrics.snapshot().step >= before + 10, 60,
                 "the reattached run does not step")
        print(f"stop_watcher took {took:.2f} s; reattached at step "
              f"{second.metrics.snapshot().step}")
        second.request_stop()
        assert second.wait(30)
        assert second.state == "stopped", second.message
        wait_for(lambda: not live_members(pgids), 60, f"left running: {live_members(pgids)}")
    finally:
        stop_watcher(run_dir)
        if second is not None:
            second.request_stop()
            second.wait(30)
        kill_all(pgids)
        reap(controller)
    assert RunRecord.load(run_dir).state == "stopped"
    leaks = files_holding(token.encode(), config_dir(), data_dir(), isolated_dirs, tmp_path)
    assert leaks == [], f"the secret was written to {leaks}"


def test_with_restarts_the_watcher_restarts_every_task_and_the_gui_takes_the_new_ones_back(
        stub_python: Callable[..., str]) -> None:
    controller, run_dir, pgids = launch_detached("watched-restart", stub_python(),
                                                 checkpoint_every=10, min_step=25)
    second: RunController | None = None
    new: list[int] = []
    try:
        start_watcher(RunRecord.load(run_dir), None, 1)
        wait_for(lambda: "watching run" in log_of(run_dir), 60,
                 f"the watcher did not attach: {log_of(run_dir)}")
        os.killpg(RunRecord.load(run_dir).pids()["worker:1"], signal.SIGKILL)
        restarted = wait_for(lambda: RunRecord.load(run_dir).restarts == 1, 60,
                             f"no restart: {log_of(run_dir)}")
        record = RunRecord.load(run_dir)
        new = list(record.pids().values())
        assert record.state == "running" and not set(new) & set(pgids), (pgids, new)
        wait_for(lambda: "restarting every task from the last checkpoint" in log_of(run_dir), 60,
                 f"the restart is not in the watcher's log: {log_of(run_dir)}")
        wait_for(lambda: not live_members(pgids), 60, f"old tasks left: {live_members(pgids)}")

        def resumed() -> list[int]:
            events = list(read_all(run_dir / "output" / "events-worker-0.jsonl"))
            starts = [i for i, e in enumerate(events) if e.kind == "started"]
            last = starts[-1]
            if len(starts) < 2 or not any(e.kind in STEP_KINDS for e in events[last:]):
                return []
            return [events[last].get("resumed_from_step")]
        stepping = wait_for(resumed, 60, "the restarted tasks do not step")
        assert resumed()[0] >= 20
        print(f"restart recorded {restarted:.1f} s after the kill; stepping again "
              f"{restarted + stepping:.1f} s after it, from step {resumed()[0]}")

        assert stop_watcher(run_dir) is True  # the GUI takes the restarted tasks back
        second = reattach(RunRecord.load(run_dir))
        before = steps_written(run_dir)
        wait_for(lambda: second.metrics.snapshot().step > before, 60, "no step after reattach")
        second.request_stop()
        assert second.wait(30) and second.state == "stopped", second.message
        wait_for(lambda: not live_members(pgids + new), 60,
                 f"left running: {live_members(pgids + new)}")
    finally:
        stop_watcher(run_dir)
        if second is not None:
            second.request_stop()
            second.wait(30)
        kill_all(pgids + new)
        reap(controller)


# -- no TensorFlow: retries, pid reuse, ended runs --------------------------------------------
def sleeping_task() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "300"], start_new_session=True)


def fake_run(name: str, tasks: dict[str, int], machines: list[MachineRecord] | None = None,
             state: RunState = RunState.RUNNING) -> Path:
    bundle = render_bundle(place_local(Plan(run_name=name, steps=5)), runs_dir() / name)
    record = RunRecord(run_id=f"{name}-1", run_name=name, bundle=str(bundle.path),
                       strategy=Strategy.ONE_DEVICE, created=time.time(), state=state,
                       machines=[MachineRecord("local", str(bundle.path), sys.executable),
                                 *(machines or [])],
                       tasks=[TaskRecord(t, "local", p) for t, p in tasks.items()])
    record.save()
    return bundle.path


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_an_unreachable_machine_is_retried_and_nothing_is_killed() -> None:
    task = sleeping_task()
    far = Machine(name="far", host="127.0.0.1", port=closed_port(), user="nobody",
                  auth="password")
    run_dir = fake_run("unreachable", {"worker:0": task.pid},
                       [MachineRecord("far", "/nonexistent", "python3", "", far.to_dict())])
    try:
        pid = start_watcher(RunRecord.load(run_dir), {"far": {"password": "x"}}, 0)
        wait_for(lambda: "trying again in 30 s" in log_of(run_dir), 60,
                 f"no retry was logged: {log_of(run_dir)}")
        assert "Cannot reattach: far:" in log_of(run_dir)
        time.sleep(1)
        assert task.poll() is None and is_watcher(pid, run_dir)
        # It exits on SIGTERM during its 30 s wait to try again: within this timeout, which a
        # watcher that acted only at its next try would pass (then False).
        assert stop_watcher(run_dir, timeout=20) is True
        assert task.poll() is None  # the watcher stopped nothing
        assert RunRecord.load(run_dir).state == "running"
        assert "SIGTERM: the run is left to dtgui" in log_of(run_dir)
    finally:
        task.kill()
        task.wait()


def test_stop_watcher_never_signals_a_process_that_is_not_this_runs_watcher() -> None:
    run_dir = fake_run("reused", {})
    other = fake_run("other", {})
    strangers = [sleeping_task(),  # a reused pid
                 subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)",
                                   "dtgui.launch.start.watcher", str(other)])]  # another run's
    try:
        for stranger in strangers:
            (run_dir / PID_NAME).write_text(f"{stranger.pid}\n")
            assert watcher_pid(run_dir) is None
            assert stop_watcher(run_dir) is True
            assert stranger.poll() is None
            assert not (run_dir / PID_NAME).exists()
    finally:
        for stranger in strangers:
            stranger.kill()
            stranger.wait()


def test_a_run_that_already_ended_needs_no_watcher() -> None:
    run_dir = fake_run("ended", {}, state=RunState.FINISHED)
    pid = start_watcher(RunRecord.load(run_dir), None, 0)
    wait_for(lambda: not is_watcher(pid, run_dir), 60, "the watcher did not exit")
    assert "has already ended (finished)" in log_of(run_dir)
    assert not (run_dir / PID_NAME).exists()
    assert stop_watcher(run_dir) is True


# -- over SSH: the real sshd test hosts (tests/sshhosts.py) -----------------------------------
ssh_lab = conftest_ssh.ssh_lab
ssh_env = conftest_ssh.ssh_env
real_keyring = conftest_ssh.real_keyring


@pytest.fixture
def lab(ssh_lab: sshhosts.SshLab, ssh_env: Path, stub_python: Callable[..., str]
        ) -> Iterator[tuple[sshhosts.SshLab, str]]:
    python = stub_python(remote_python.python_for())
    conftest_ssh.trust(*ssh_lab.hosts)
    yield ssh_lab, python


def test_over_ssh_a_killed_remote_worker_fails_the_detached_run(
        lab: tuple[sshhosts.SshLab, str], isolated_dirs: Path, tmp_path: Path) -> None:
    ssh_lab, python = lab
    hosts = {h.name: h for h in ssh_lab.hosts}
    given = {n: {"passphrase": ssh_lab.passphrase} for n in ("h2", "h3")}
    targets = [Target(n, machine(ssh_lab, hosts[n], key_file=str(ssh_lab.pass_key)),
                      python=python) for n in ("h2", "h3")]
    plan = Plan(run_name="watched-ssh", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                replicas_per_task=1, steps=FOREVER, steps_per_epoch=10, checkpoint_every=0)
    controller = launch_plan(plan, targets=targets, assignments=assign(plan, machines=["h2", "h3"]),
                             connect=Connector(given))
    run_dir = controller.bundle.path
    assert controller.record is not None
    pgids = list(controller.record.pids().values())  # the hosts share this process table
    try:
        wait_for(lambda: controller.metrics.snapshot().step >= 3, 60, "no step")
        controller.detach()
        pid = start_watcher(RunRecord.load(run_dir), given, 0)  # the passphrase: stdin only
        wait_for(lambda: "watching run" in log_of(run_dir), 60,
                 f"the watcher did not attach: {log_of(run_dir)}")
        for what in ("cmdline", "environ"):
            assert ssh_lab.passphrase.encode() not in Path(f"/proc/{pid}/{what}").read_bytes()
        killed = time.monotonic()
        os.killpg(RunRecord.load(run_dir).pids()["worker:1"], signal.SIGKILL)
        failed = wait_for(lambda: RunRecord.load(run_dir).state == "failed", 60,
                          f"the record does not say failed: {log_of(run_dir)}")
        wait_for(lambda: not live_members(pgids), 60, f"left running: {live_members(pgids)}")
        print(f"over SSH: kill -9 -> record failed {failed:.1f} s, every process gone "
              f"{time.monotonic() - killed:.1f} s after the kill")
        wait_for(lambda: not is_watcher(pid, run_dir), 60, "the watcher did not exit")
    finally:
        stop_watcher(run_dir)
        controller.request_stop()
        controller.wait(30)
        kill_all(pgids)
    record = RunRecord.load(run_dir)
    assert record.message.startswith("worker:1 on h3 failed"), record.message
    leaks = files_holding(ssh_lab.passphrase.encode(), config_dir(), data_dir(), isolated_dirs)
    assert leaks == [], f"the passphrase was written to {leaks}"
