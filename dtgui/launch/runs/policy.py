"""What the run policy is allowed to do, and how a task's end is put into words."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dtgui.worker.stop_request import TASK_STOP_SECONDS


@dataclass(frozen=True)
class RunPolicy:
    max_restarts: int = 0  # after a failure, restart every task from the last checkpoint
    stale_seconds: float = 30.0  # no event at all for this long: the task is hung
    unreachable_seconds: float = 6.0  # a machine that does not answer for this long fails
    stop_grace: float = 5.0  # a failed run's other tasks: SIGTERM, then SIGKILL after this long
    # a stopped run: its tasks save a checkpoint at the step reached, then SIGKILL after this
    # long (dtgui.worker.stop_request)
    save_grace: float = TASK_STOP_SECONDS
    reap_seconds: float = 300.0  # keep trying to kill the tasks of an unreachable machine


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_text(code: int | None, primary: bool) -> str:
    """Why a task's end fails the run, from its exit code (None: unknown)."""
    if code is None:
        return ("it ended without an exit status: it was killed (SIGKILL?) and no process "
                "of it is left")
    if code == 0:
        return ("it ended before the run finished (a server must run until the training "
                "tasks are done)") if not primary else "it finished"
    if code < 0:
        return f"it was killed by {_signal_name(-code)}"
    if code == 143:
        return "it was stopped by SIGTERM from outside dtgui"
    if code == 130:
        return "it was interrupted (SIGINT)"
    if code > 128:
        return f"it was killed by {_signal_name(code - 128)} (exit {code})"
    if code == 127:
        return "its Python interpreter was not found (exit 127): check the machine's Python"
    return f"it exited with code {code}"


def reap_later(executors: Sequence[Any], seconds: float) -> None:
    """Keep sending SIGKILL to the tasks of unreachable machines until it gets through, for
    up to `seconds` (their processes must not outlive the run when the network comes back)."""
    def work() -> None:
        deadline = time.monotonic() + seconds
        pending = list(executors)
        while pending and time.monotonic() < deadline:
            for ex in list(pending):
                try:
                    ex.signal(signal.SIGKILL)
                    pending.remove(ex)
                except Exception:  # noqa: BLE001 - still unreachable: try again
                    time.sleep(2.0)
        for ex in executors:
            with contextlib.suppress(Exception):
                ex.close()

    if executors:
        threading.Thread(target=work, name="dtgui-reaper", daemon=True).start()
