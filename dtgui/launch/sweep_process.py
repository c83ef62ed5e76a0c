"""A sweep run in the background by a process of its own (`dtgui sweep OUT`), so that its
queue goes on while dtgui is closed (docs/sweeps.md).

`start_sweep(folder, spec, plan)` writes the sweep's folder (`sweep.json`) and starts
`python -m dtgui sweep FOLDER` in a session of its own, its output in `FOLDER/sweep.log`;
that command goes on with the sweep the folder holds. `resume_sweep(folder, trials)` goes on
with a sweep that ended (or was stopped) up to `trials` in all. `sweep_pid(folder)` says
whether it still runs; `stop_sweep(folder)` asks it to stop (SIGTERM: it stops the running trials and
exits). Quick: nothing here waits for the sweep.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from dtgui.core.plan import Plan
from dtgui.core.sweep import SweepError, SweepSpec, check, load_sweep, save_sweep
from dtgui.core.sweep_study import open_study

PID_FILE = "sweep.pid"
LOG_FILE = "sweep.log"


def start_sweep(folder: Path, spec: SweepSpec, plan: Plan, python: str = "") -> int:
    """Start the sweep in the background; its pid. SweepError when it cannot run (its
    storage cannot be reached ...), or when a sweep process already runs in `folder`."""
    problems = check(spec, plan)
    if problems:
        raise SweepError(problems)
    if sweep_pid(folder) is not None:
        raise SweepError([f"A sweep already runs in {folder}."])
    folder.mkdir(parents=True, exist_ok=True)
    open_study(spec, folder)  # made here, once: the view and the process only open it
    save_sweep(folder, spec, plan)
    return _spawn(folder, python, [])


def resume_sweep(folder: Path, trials: int, python: str = "") -> int:
    """Go on with the sweep in `folder` in the background, up to `trials` trials in all; its
    pid. SweepError when the folder holds no sweep, or its process still runs."""
    load_sweep(folder)  # a folder without a sweep: said here, not in the log
    if sweep_pid(folder) is not None:
        raise SweepError([f"A sweep already runs in {folder}."])
    return _spawn(folder, python, ["--trials", str(trials)])


def _spawn(folder: Path, python: str, args: list[str]) -> int:
    with (folder / LOG_FILE).open("ab") as log:
        proc = subprocess.Popen([python or sys.executable, "-m", "dtgui", "sweep", str(folder),
                                 *args],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=str(folder))
    (folder / PID_FILE).write_text(f"{proc.pid}\n", encoding="utf-8")
    return proc.pid


def sweep_pid(folder: Path) -> int | None:
    """The pid of the sweep process of `folder` while it runs, else None."""
    try:
        pid = int((folder / PID_FILE).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None
    try:  # a zombie (our own child, ended) counts as ended
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            if f.read().rsplit(")", 1)[-1].split()[0] == "Z":
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                return None
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"sweep" not in f.read():
                return None  # the pid was reused
    except OSError:
        return None
    return pid


def stop_sweep(folder: Path) -> bool:
    """Ask the sweep process to stop (its running trials are stopped); False when none
    runs."""
    pid = sweep_pid(folder)
    if pid is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    return True
