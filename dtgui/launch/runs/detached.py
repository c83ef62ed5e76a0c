"""Processes that outlive dtgui, and their pid files: the one place that starts, finds and
stops them (the run watcher, `dtgui.launch.start.watcher`; a sweep's queue,
`dtgui.launch.sweeps.sweep_process`).

A `Detached` kind names its module and the pid and log files it keeps in the folder it works
on. `kind.start(folder, args)` runs ``python -m MODULE FOLDER ARGS`` in a session of its own
(it outlives dtgui and its terminal), its output appended to ``FOLDER/LOG``, its pid written to
``FOLDER/PID`` before it is given its stdin; `kind.pid(folder)` is that pid while the process
still runs; `kind.stop(folder, timeout)` asks it to end (SIGTERM) and waits up to `timeout`.
Pids are reused: a process counts only when its command line names the module and the folder.
Inside the process, `kind.claim(folder)` writes its own pid and removes it when it exits.

No Qt here; `start` and `pid` return quickly, `stop` with a timeout waits (not on a UI thread).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from dtgui.core.settings import atomic_write_text

PACKAGE_ROOT = Path(__file__).resolve().parents[3]  # `-m dtgui...` works from a checkout
_children: dict[int, subprocess.Popen[bytes]] = {}  # processes this one started, to reap


def folder_of(path: Path | str) -> Path:
    """The folder as a process's command line names it (absolute, links resolved)."""
    return Path(os.path.realpath(path))


def command_line(pid: int) -> list[str]:
    """The process's arguments ([] when it is gone, or a zombie: it has none)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def reap() -> None:
    """Collect the exit status of the processes this one started that have ended (no zombie
    is left to look alive)."""
    for pid, proc in list(_children.items()):
        if proc.poll() is not None:
            del _children[pid]


@dataclass(frozen=True)
class Detached:
    """One kind of detached process: its module and its files in the folder it works on."""

    module: str
    pid_name: str
    log_name: str

    def start(self, folder: Path, args: Sequence[str] = (), *, stdin: bytes | None = None,
              python: str = "") -> int:
        """Start ``python -m MODULE FOLDER ARGS``; its pid. `stdin` is written to it once its
        pid file is written (the process reads it to its end first), then closed."""
        folder = folder_of(folder)
        argv = [python or sys.executable, "-m", self.module, str(folder), *args]
        with open(folder / self.log_name, "ab") as out:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, cwd=PACKAGE_ROOT,
                start_new_session=True, close_fds=True)
        atomic_write_text(folder / self.pid_name, f"{proc.pid}\n")
        if proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(stdin or b"")
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
        _children[proc.pid] = proc
        return proc.pid

    def is_one(self, pid: int, folder: Path | str) -> bool:
        """Whether process `pid` is this kind's process for `folder`."""
        if pid <= 0:
            return False
        reap()
        argv = command_line(pid)
        if self.module not in argv:
            return False
        want = str(folder_of(folder))
        return any(os.path.realpath(a) == want for a in argv[argv.index(self.module) + 1:]
                   if not a.startswith("-"))

    def pid(self, folder: Path | str) -> int | None:
        """The pid of this kind's process for `folder` while it runs, else None."""
        try:
            pid = int((folder_of(folder) / self.pid_name).read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if self.is_one(pid, folder) else None

    def stop(self, folder: Path | str, timeout: float = 10.0) -> bool:
        """SIGTERM the process and wait up to `timeout` s for it to exit (0: do not wait).
        True when none is left (it exited, or none ran; its pid file is then removed), False
        when it still runs (or belongs to another user). Only a process whose command line
        is this kind's for `folder` is ever signalled."""
        pid = self.pid(folder)
        if pid is not None:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            except PermissionError:  # another user's: not ours to stop
                return False
            deadline = time.monotonic() + timeout
            while self.is_one(pid, folder):
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.05)
        self.forget(folder, pid)
        return True

    def forget(self, folder: Path | str, pid: int | None) -> None:
        """Remove the pid file if it names `pid` (with None: whatever it names, that is not
        running)."""
        path = folder_of(folder) / self.pid_name
        try:
            recorded: int | None = int(path.read_text().strip())
        except (OSError, ValueError):
            recorded = None
        if pid is None or recorded == pid or recorded is None:
            with contextlib.suppress(OSError):
                path.unlink()

    @contextlib.contextmanager
    def claim(self, folder: Path | str) -> Iterator[None]:
        """In the process itself: its pid in the pid file while it runs (also when it was
        started by hand), removed when it ends."""
        with contextlib.suppress(OSError):
            atomic_write_text(folder_of(folder) / self.pid_name, f"{os.getpid()}\n")
        try:
            yield
        finally:
            self.forget(folder, os.getpid())
