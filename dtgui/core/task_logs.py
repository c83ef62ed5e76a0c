"""Each task's last log lines (its log file's and its `log` events'), and how many it ever had.

Only the last LOG_LINES_KEPT lines of a task are kept, so a run that floods its log holds a
bounded amount; the count lets a reader that follows the lines say when some were dropped.
Two views of a task's output are kept: every line as the task wrote it (`raw`), and the lines
a person reads, where TensorFlow's start-up messages (its libraries' info and warning lines)
are folded away and counted (`folded`), and a warning of TensorFlow's that dtgui can say
plainly is said in words (`shown_line`); the log files keep all.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from itertools import islice

LOG_LINES_KEPT = 5000
# Info and warning lines of TensorFlow and the libraries it loads: absl/glog's
# "I0000 00:00:1732871234.123456  4242 file.cc:12] ..." (seconds since 1970 before absl's
# logging is set up) and TensorFlow's own C++ logging
# "2026-11-29 04:00:00.123456: W tensorflow/...", absl's note before its logging starts and
# the CPU-instructions hint that follows TensorFlow's first line. Errors (E, F) are kept, but
# for the one a ParameterServer coordinator logs at each function it releases ("Failed to
# clear function handle cache: UNIMPLEMENTED: Releasing a multi-device component handle on a
# remote device is not yet implemented"): TensorFlow's own gap, harmless, hundreds a run.
FRAMEWORK_NOISE = re.compile(
    r"^(?:[IW]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+\s+\S+:\d+\]"
    r"|E\d{4} \d\d:\d\d:\d+\.\d+\s+\d+\s+function_handle_cache\.cc:\d+\] Failed to clear "
    r"function handle cache: UNIMPLEMENTED"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IW] \S+:\d+\]"
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|To enable the following instructions: .* rebuild TensorFlow)")


# The line Python's warnings print under a warning: the source line that warned.
WARNING_SOURCE = re.compile(r"^\s+warnings\.warn\(")
# Python warnings of TensorFlow's that say nothing a run's user can act on, in words.
IN_WORDS = (
    (re.compile(r"UserWarning: To make it possible to preserve tf\.data options across"),
     "· TensorFlow noted that tf.data options were read while the training step was traced: "
     "its own internals, nothing to change (the warning itself: \"all lines\")"),
)


def shown_line(line: str, fold: re.Pattern[str] | None = None,
               kept: re.Pattern[str] | None = None) -> str | None:
    """The line as a person reads it: as written, in words (IN_WORDS), or None: folded away
    (TensorFlow's start-up messages, a warning's source line, and what `fold` matches),
    unless `kept` matches it (it says something the run needs said)."""
    if kept is not None and kept.search(line):
        return line
    if FRAMEWORK_NOISE.match(line) or WARNING_SOURCE.match(line) or (
            fold is not None and fold.search(line)):
        return None
    for warning, words in IN_WORDS:
        if warning.search(line):
            return words
    return line


class _Kept:
    """A task's last LOG_LINES_KEPT lines of one view, and how many it ever had."""

    def __init__(self) -> None:
        self.lines: deque[str] = deque(maxlen=LOG_LINES_KEPT)
        self.total = 0

    def add(self, lines: list[str]) -> bool:
        before = len(self.lines)
        self.lines.extend(lines)
        self.total += len(lines)
        return bool(lines) and (len(self.lines) != before or self.lines.maxlen == before)

    def since(self, seen: int) -> tuple[list[str], int]:
        if not self.lines or self.total <= seen:
            return [], self.total
        new = min(self.total - seen, len(self.lines))
        return list(islice(self.lines, len(self.lines) - new, None)), self.total


class TaskLogs:
    """Not thread-safe: `LiveRun` holds one (in its `RunCurves`) under its lock."""

    def __init__(self) -> None:
        self._shown: dict[str, _Kept] = {}
        self._raw: dict[str, _Kept] = {}
        self._folded: dict[str, int] = {}

    def _of(self, task: str) -> tuple[_Kept, _Kept]:
        if task not in self._shown:
            self._shown[task], self._raw[task] = _Kept(), _Kept()
        return self._shown[task], self._raw[task]

    def add(self, task: str, lines: Iterable[str]) -> bool:
        """Keep `lines` of `task`, shown as they are (dtgui's own: its `log` events, its
        notes); True when what is kept changed."""
        shown, raw = self._of(task)
        added = list(lines)
        raw.add(added)
        return shown.add(added)

    def add_output(self, task: str, lines: Iterable[str], fold: re.Pattern[str] | None = None,
                   kept: re.Pattern[str] | None = None) -> bool:
        """Keep `lines` of what `task` printed: all of them as written, and as read
        (`shown_line`: TensorFlow's messages folded and counted); True when either changed."""
        shown, raw = self._of(task)
        added = list(lines)
        read = [said for said in (shown_line(ln, fold, kept) for ln in added)
                if said is not None]
        if len(read) < len(added):
            self._folded[task] = self._folded.get(task, 0) + len(added) - len(read)
        return raw.add(added) | shown.add(read)

    def lines(self, task: str) -> list[str]:
        """The task's kept lines as read."""
        kept = self._shown.get(task)
        return list(kept.lines) if kept is not None else []

    def since(self, task: str, seen: int, raw: bool = False) -> tuple[list[str], int]:
        """The lines of `task` (as read, or `raw`: as written) added after the first `seen`
        ones, and how many were ever added.

        When more than LOG_LINES_KEPT lines arrived since `seen`, fewer lines than
        `total - seen` come back (the caller can say some were dropped).
        """
        kept = (self._raw if raw else self._shown).get(task)
        return kept.since(seen) if kept is not None else ([], 0)

    def folded(self, task: str) -> int:
        """How many of the task's lines were folded away (TensorFlow's messages)."""
        return self._folded.get(task, 0)

    def tasks(self) -> list[str]:
        return sorted(self._shown)
