"""What a running run's tasks answered to a profile asked of them, read from their logs.

A training process logs "profile: capturing steps A-B" when its workers agreed on the steps,
"profile: N steps asked while steps A-B are being captured" when it declines one
(dtgui.worker.progress) and "profile: steps A-B captured in FOLDER" when its trace is written
(dtgui.worker.profile_capture); the lines arrive as "[level] message" (dtgui.core.run_curves).
An answer is a sentence; `failed` tells a task that did not answer (or a machine not reached)
from a refusal (the run could not take it: the command line's exit 1 against 2).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

CAPTURING = re.compile(r"\] profile: capturing steps (\d+)-(\d+)")
CAPTURED = re.compile(r"\] profile: steps (\d+)-(\d+) captured in ")
NOTE = re.compile(r"^\[\w+\] (profile: .*)")  # any of a task's lines on its profiles
BUSY = re.compile(r"\] profile: \d+ steps asked while steps (\d+)-(\d+) are being captured")
ENDED = "the run has ended"
REFUSED = "no profile: "  # every answer but WRITTEN_MESSAGE starts so
# the answers that are no refusal: a task silent, a machine not reached
FAILED = re.compile(r"^no profile: (.+ did not .+ within \S+ s \(the run goes on\)"
                    r"|could not ask for it on )")


def capturing_steps(lines: Iterable[str]) -> tuple[int, int] | None:
    """The steps a task said it captures, in these (new) log lines; None: not said yet."""
    for line in lines:
        found = CAPTURING.search(line)
        if found:
            return int(found.group(1)), int(found.group(2))
    return None


def busy_steps(lines: Iterable[str]) -> tuple[int, int] | None:
    """The steps a capture under way takes, if a task declined the request for it."""
    for line in lines:
        found = BUSY.search(line)
        if found:
            return int(found.group(1)), int(found.group(2))
    return None


def profile_notes(lines: Iterable[str]) -> list[str]:
    """What these (new) log lines say of profiles: the steps captured, where their traces
    are, a capture that failed."""
    return [found.group(1) for found in map(NOTE.match, lines) if found]


def captured(lines: Iterable[str]) -> bool:
    """A task said its trace is written, in these (new) log lines."""
    return any(CAPTURED.search(line) for line in lines)


def silent_message(tasks: Iterable[str], what: str, seconds: float) -> str:
    """The tasks that did not answer in time (the run itself goes on)."""
    names = ", ".join(sorted(tasks))
    return f"{REFUSED}{names} did not {what} within {seconds:g} s (the run goes on)"


def unasked_message(errors: Iterable[str]) -> str:
    """The machines the request could not be written to."""
    return f"{REFUSED}could not ask for it on " + "; ".join(errors)


def busy_message(first: int, last: int) -> str:
    return f"{REFUSED}steps {first}-{last} are being captured (ask again once it is written)"


def count_refusal(steps: int, most: int) -> str:
    """'' for a count of steps a request may ask, else why not."""
    return "" if 0 < steps <= most else f"{REFUSED}give 1 to {most} steps"


def failed(answer: str) -> bool:
    """An answer that is neither the trace written nor a refusal."""
    return FAILED.match(answer) is not None


def profiling_message(first: int, last: int, asked: int = 0) -> str:
    """The steps captured; fewer than `asked` only where the run ends first."""
    text = f"profiling steps {first}\u2013{last}\u2026"
    if last - first + 1 < asked:
        text += f" (the run ends at {last}: {last - first + 1} of the {asked} asked)"
    return text


WRITTEN_MESSAGE = "profile written"
