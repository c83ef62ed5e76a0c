"""LocalExecutor: the tasks of this machine, as processes in sessions of their own.

Tasks this process started are `Popen` children (their exit codes come from `wait`); tasks
adopted from a run record (a new GUI session) are followed through /proc and their
`output/pids/<task>.exit` files. Either way a task counts as alive while any process of its
process group is (zombies excepted), and as hung when one of them is stopped (state T).
"""

from __future__ import annotations

import contextlib
import os
import signal as signals
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from dtgui.core.bundle import Bundle
from dtgui.core.cluster import busy_ports
from dtgui.core.events import parse_events
from dtgui.core.plan import TaskSpec
from dtgui.launch.executor import (
    LOCAL_MAX_CHUNK,
    WRAPPER,
    Executor,
    MachinePoll,
    TaskPoll,
    split_log,
)

if TYPE_CHECKING:  # paramiko is imported only where a machine is remote
    from dtgui.remote.transfer import CopyProgress


def group_states(pgids: Iterable[int]) -> dict[int, list[str]]:
    """Process group -> the states (R, S, T, Z, ...) of its processes, from /proc."""
    wanted = set(pgids)
    found: dict[int, list[str]] = {p: [] for p in wanted}
    if not wanted:
        return found
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(os.path.join(entry.path, "stat"), "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 2:
            with contextlib.suppress(ValueError):
                pgid = int(fields[2])
                if pgid in wanted:
                    found[pgid].append(fields[0].decode())
    return found


def read_chunk(path: Path, offset: int, limit: int = LOCAL_MAX_CHUNK) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(limit)
    except FileNotFoundError:
        return b""


def read_exit_code(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


class LocalExecutor(Executor):
    def __init__(self, bundle: Bundle, tasks: Iterable[TaskSpec] | None = None,
                 python: str | None = None, name: str = "local") -> None:
        super().__init__(name, bundle, bundle.plan.tasks if tasks is None else tasks)
        self.python = python or sys.executable
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def prepare(self, progress: CopyProgress | None = None) -> None:
        out = self.bundle.output
        (out / "logs").mkdir(parents=True, exist_ok=True)
        (out / "pids").mkdir(parents=True, exist_ok=True)

    def busy_ports(self) -> list[str]:
        mine = {t.task_id for t in self.tasks}
        plan = self.bundle.plan.with_changes(
            tasks=tuple(t for t in self.bundle.plan.tasks if t.task_id in mine))
        return busy_ports(plan)

    def start(self) -> dict[str, int]:
        self.prepare()
        env = {**os.environ, "PYTHON": self.python}
        try:
            for task in self.tasks:
                self._start_task(task, env)
        except OSError:
            self.signal(signals.SIGKILL)
            raise
        return dict(self.pids)

    def _start_task(self, task: TaskSpec, env: dict[str, str]) -> None:
        self.bundle.output.joinpath("pids", f"{task.file_stem}.exit").unlink(missing_ok=True)
        log = open(self.bundle.log_file(task), "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(
                ["sh", "-c", WRAPPER, "dtgui-task", task.file_stem],
                cwd=self.bundle.path, env=env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        finally:
            log.close()
        self.procs[task.task_id] = proc
        self.pids[task.task_id] = proc.pid
        self.bundle.pid_file(task).write_text(f"{proc.pid}\n", encoding="utf-8")

    def poll(self) -> MachinePoll:
        result = MachinePoll(self.name)
        codes = {tid: p.poll() for tid, p in self.procs.items()}  # liveness first
        states = group_states(self.pids.values())
        for task in self.tasks:
            tid = task.task_id
            pgid = self.pids.get(tid, 0)
            live = [s for s in states.get(pgid, []) if s != "Z"]
            poll = TaskPoll(tid, alive=bool(live) or codes.get(tid, 0) is None,
                            stopped="T" in live or "t" in live)
            if not poll.alive:
                code = codes.get(tid)
                if code is None:
                    code = read_exit_code(self.bundle.output / "pids" / f"{task.file_stem}.exit")
                poll.exit_code = code
            if pgid == 0 and tid not in self.procs:
                poll.alive = False  # never started here
            ev = self._events[tid]
            chunk = read_chunk(self.bundle.events_file(task), ev.offset)
            result.behind |= len(chunk) >= LOCAL_MAX_CHUNK
            poll.raw_events = ev.take(chunk)
            poll.events = parse_events(poll.raw_events)
            lg = self._logs[tid]
            chunk = read_chunk(self.bundle.log_file(task), lg.offset)
            result.behind |= len(chunk) >= LOCAL_MAX_CHUNK
            poll.raw_log = lg.take(chunk)
            poll.log_lines = split_log(poll.raw_log)
            result.tasks[tid] = poll
        return result

    def signal(self, *sigs: int, tasks: Iterable[str] | None = None) -> None:
        chosen = set(self.pids) if tasks is None else set(tasks)
        for tid, pgid in self.pids.items():
            if tid in chosen:
                for sig in sigs:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pgid, sig)

    def reap(self) -> None:
        """Collect the exit statuses of ended children (no zombies are left)."""
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0)

    def sync_checkpoints_from(self, source: Executor) -> None:
        if source is self:
            return
        from dtgui.launch.ssh_exec import SshExecutor

        if isinstance(source, SshExecutor):
            source.download_checkpoints(self.bundle.output / "checkpoints")
