"""A run's end asked by dtgui, known to every dtgui process that follows the run.

More than one process can follow a run at once (`dtgui run` and the app's reattach, the
headless watcher), each applying the run policy (`RunController`). A SIGTERM one of them
sends (Stop, the servers ended once the training finished, the rest of a failed run ended)
also ends tasks that the others follow, and an exit by SIGTERM alone reads as a stop from
outside dtgui. So the controller that ends a run first writes END_NAME, with the end's state
and message, into the output folder of every machine (where a profile request goes too);
another controller that sees a task ended by a signal reads it there before it calls that
end a failure, and follows the same end. A start writes it empty: tasks started again are
not ending.
"""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Sequence

from dtgui.core.runs.run_state import RunState
from dtgui.launch.exec.executor import Executor
from dtgui.remote.parallel import each
from dtgui.worker.stop_request import STOPPED_EXIT

END_NAME = "run_end"  # in each machine's output folder
END_BYTES = 16 * 1024  # a message is a few lines
# A task's exit code when a controller's TERM (then KILL, after the grace) ended it; None: no
# exit status (killed, or not written)
SIGNALLED_EXITS = frozenset({STOPPED_EXIT, 128 + signal.SIGKILL, -signal.SIGTERM,
                             -signal.SIGKILL, None})
ASKED_STATES = (RunState.FINISHED, RunState.STOPPED, RunState.FAILED)
log = logging.getLogger(__name__)


def ended_by_signal(code: int | None) -> bool:
    """Whether a task that exited with `code` was ended by a stop signal (dtgui's or not)."""
    return code in SIGNALLED_EXITS


def write_end(executors: Sequence[Executor], state: RunState, message: str) -> None:
    """Say on every machine that dtgui ends the run as `state` (before its tasks are
    signalled); a machine that cannot be written to is logged (its tasks are ended anyway)."""
    _put(executors, json.dumps({"state": str(state), "message": message}).encode())


def clear_end(executors: Sequence[Executor]) -> None:
    """The tasks start (again): no end is asked."""
    _put(executors, b"")


def _put(executors: Sequence[Executor], data: bytes) -> None:
    done = each(lambda ex: ex.put_output_file(END_NAME, data), list(executors),
                name="dtgui-end")
    for ex, result in zip(executors, done, strict=True):
        if isinstance(result, Exception):
            log.warning("could not write %s on %s: %s", END_NAME, ex.name, result)


def asked_end(executor: Executor) -> tuple[RunState, str] | None:
    """The end a dtgui process asked of the run, as written on `executor`'s machine (None:
    none asked, or it cannot be read)."""
    try:
        data = executor.read_output_file(END_NAME, END_BYTES)
        said = json.loads(data) if data.strip() else {}
        state = RunState.named(str(said.get("state", "")))
    except Exception as exc:  # noqa: BLE001 - unreadable: no end is known to be asked
        log.warning("could not read %s on %s: %s", END_NAME, executor.name, exc)
        return None
    if state not in ASKED_STATES:
        return None
    return state, str(said.get("message", ""))
