"""What a running run's tasks answered to a profile asked of them, read from their logs.

A training process logs "profile: capturing steps A-B" when its workers agreed on the steps
(dtgui.worker.progress) and "profile: steps A-B captured in FOLDER" when its trace is written
(dtgui.worker.profile_capture); the lines arrive as "[level] message" (dtgui.core.run_curves).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

CAPTURING = re.compile(r"\] profile: capturing steps (\d+)-(\d+)")
CAPTURED = re.compile(r"\] profile: steps (\d+)-(\d+) captured in ")
ENDED = "the run has ended"


def capturing_steps(lines: Iterable[str]) -> tuple[int, int] | None:
    """The steps a task said it captures, in these (new) log lines; None: not said yet."""
    for line in lines:
        found = CAPTURING.search(line)
        if found:
            return int(found.group(1)), int(found.group(2))
    return None


def captured(lines: Iterable[str]) -> bool:
    """A task said its trace is written, in these (new) log lines."""
    return any(CAPTURED.search(line) for line in lines)


def silent_message(tasks: Iterable[str], what: str, seconds: float) -> str:
    """The tasks that did not answer in time (the run itself goes on)."""
    names = ", ".join(sorted(tasks))
    return f"no profile: {names} did not {what} within {seconds:g} s (the run goes on)"


def profiling_message(first: int, last: int) -> str:
    return f"profiling steps {first}\u2013{last}\u2026"


WRITTEN_MESSAGE = "profile written"
