"""Runs a bundle's tasks as local processes and follows them until the run ends.

One `RunController` per run. `start()` launches every task script of the bundle (the same
scripts `run.sh` runs) in its own session/process group, then a monitor thread polls the
processes and tails each task's events and log into a `RunMetrics`. Nothing here blocks the
caller for long: `request_stop()` only sets a flag that the monitor thread acts on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from dtgui.core.bundle import Bundle, primary_tasks, render_bundle
from dtgui.core.cluster import busy_ports, place_local
from dtgui.core.events import EventTail
from dtgui.core.metrics import RunMetrics
from dtgui.core.plan import Plan, TaskSpec

POLL_SECONDS = 0.2
STOP_GRACE_SECONDS = 5.0


class LaunchError(RuntimeError):
    """The run could not start; the message says why and what to do."""


class LogTail:
    """New complete lines of a text log since the last call."""

    def __init__(self, path: Path) -> None:
        self._events = EventTail(path)

    def read_lines(self) -> list[str]:
        tail = self._events
        try:
            with open(tail.path, "rb") as f:
                f.seek(tail.offset)
                chunk = f.read(1 << 20)
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        tail.offset += end + 1
        return chunk[:end].decode("utf-8", "replace").splitlines()


class RunController:
    def __init__(self, bundle: Bundle, metrics: RunMetrics | None = None,
                 python: str | None = None) -> None:
        self.bundle = bundle
        self.metrics = metrics or RunMetrics(bundle.plan.steps)
        self.python = python or sys.executable
        self.state = "ready"  # ready | running | stopping | finished | failed | stopped
        self.message = ""
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._tasks = {t.task_id: t for t in bundle.plan.tasks}
        self._event_tails = {t.task_id: EventTail(bundle.events_file(t)) for t in bundle.plan.tasks}
        self._log_tails = {t.task_id: LogTail(bundle.log_file(t)) for t in bundle.plan.tasks}
        self._stop_requested = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    # -- public API ------------------------------------------------------------------------
    def start(self) -> None:
        problems = busy_ports(self.bundle.plan)
        if problems:
            raise LaunchError(" ".join(problems))
        out = self.bundle.output
        (out / "logs").mkdir(parents=True, exist_ok=True)
        (out / "pids").mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHON": self.python}
        try:
            for task in self.bundle.plan.tasks:
                self._start_task(task, env)
        except OSError as exc:
            self._kill_all(signal.SIGKILL)
            raise LaunchError(f"could not start the tasks: {exc}") from exc
        self.state = "running"
        self._thread = threading.Thread(target=self._monitor, name="run-monitor", daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        """Ask the monitor thread to end every task (returns at once)."""
        if self.state == "running":
            self.state = "stopping"
        self._stop_requested.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def pgids(self) -> list[int]:
        return [p.pid for p in self._procs.values()]

    # -- internals -------------------------------------------------------------------------
    def _start_task(self, task: TaskSpec, env: dict[str, str]) -> None:
        log = open(self.bundle.log_file(task), "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(
                ["sh", str(self.bundle.task_script(task))],
                cwd=self.bundle.path, env=env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        finally:
            log.close()
        self._procs[task.task_id] = proc
        self.bundle.pid_file(task).write_text(f"{proc.pid}\n", encoding="utf-8")
        self.metrics.set_task_state(task.task_id, "starting")

    def _monitor(self) -> None:
        primaries = {t.task_id for t in primary_tasks(self.bundle.plan)}
        try:
            while True:
                self._read_outputs()
                if self._stop_requested.is_set():
                    self._stop_all("stopped", "stopped by the user")
                    return
                exited = {tid: p.poll() for tid, p in self._procs.items()}
                for tid, code in exited.items():
                    if code is not None and code != 0:
                        self._fail(tid, code)
                        return
                if all(exited[t] == 0 for t in primaries):
                    self._read_outputs()
                    for tid in primaries:
                        self.metrics.set_task_state(tid, "finished", exit_code=0)
                    self._stop_all("finished", "all tasks finished")
                    return
                time.sleep(POLL_SECONDS)
        finally:
            self._read_outputs()
            self._done.set()

    def _read_outputs(self) -> None:
        for tid in self._tasks:
            events = self._event_tails[tid].read_new()
            if events:
                self.metrics.add_events(events)
            lines = self._log_tails[tid].read_lines()
            if lines:
                self.metrics.add_log_lines(tid, lines)

    def _fail(self, task_id: str, code: int) -> None:
        self._read_outputs()
        snap = self.metrics.snapshot()
        error = snap.tasks.get(task_id).error if task_id in snap.tasks else ""
        if not error:
            tail = self.metrics.log_lines(task_id)[-5:]
            error = f"exited with code {code}" + (": " + " | ".join(tail) if tail else "")
        self.metrics.set_task_state(task_id, "failed", exit_code=code, error=error)
        self.message = f"{task_id} failed: {error}"
        self._stop_all("failed", self.message)

    def _stop_all(self, final_state: str, message: str) -> None:
        self._kill_all(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        while time.monotonic() < deadline and any(p.poll() is None for p in self._procs.values()):
            time.sleep(0.05)
        self._kill_all(signal.SIGKILL)
        for tid, proc in self._procs.items():
            try:
                code = proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
            snap_state = self.metrics.snapshot().tasks.get(tid)
            if snap_state is not None and snap_state.status not in ("finished", "failed"):
                self.metrics.set_task_state(tid, "stopped", exit_code=code)
        self.state = final_state
        if not self.message:
            self.message = message

    def _kill_all(self, sig: int) -> None:
        for proc in self._procs.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)


def unique_run_dir(root: Path, name: str) -> Path:
    candidate = root / name
    n = 2
    while candidate.exists():
        candidate = root / f"{name}-{n}"
        n += 1
    return candidate


def launch_plan(plan: Plan, runs_root: Path, python: str | None = None) -> RunController:
    """Place, render the run's bundle under `runs_root`, and start it. Blocks briefly: call it
    off the UI thread."""
    placed = plan if plan.tasks else place_local(plan)
    bundle = render_bundle(placed, unique_run_dir(runs_root, placed.run_name))
    controller = RunController(bundle, python=python)
    controller.start()
    return controller
