"""Each task's last log lines (its log file's and its `log` events'), and how many it ever had.

Only the last LOG_LINES_KEPT lines of a task are kept, so a run that floods its log holds a
bounded amount; the count lets a reader that follows the lines say when some were dropped.
TensorFlow's start-up messages (its libraries' info and warning lines) are folded into one line
that says how many there were (`folded`, applied by `LiveRun.add_log_lines` to the tasks' log
files' lines): the views show the task's own lines; the log files keep all.
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
# the CPU-instructions hint that follows TensorFlow's first line. Errors (E, F) are kept.
FRAMEWORK_NOISE = re.compile(
    r"^(?:[IW]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+\s+\S+:\d+\]"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IW] \S+:\d+\]"
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|To enable the following instructions: .* rebuild TensorFlow)")


def folded(lines: Iterable[str], shown: re.Pattern[str] | None = None) -> list[str]:
    """The lines with each run of TensorFlow's start-up messages replaced by one line
    saying how many were folded away; those `shown` matches stay (they say something the
    run needs said)."""
    out: list[str] = []
    run = 0
    for line in lines:
        if FRAMEWORK_NOISE.match(line) and not (shown is not None and shown.search(line)):
            run += 1
            continue
        if run:
            out.append(_fold_line(run))
            run = 0
        out.append(line)
    if run:
        out.append(_fold_line(run))
    return out


def _fold_line(count: int) -> str:
    return (f"· {count} message{'s' if count > 1 else ''} of TensorFlow's start-up folded away "
            "(kept in the task's log file)")


class TaskLogs:
    """Not thread-safe: `LiveRun` holds one (in its `RunCurves`) under its lock."""

    def __init__(self) -> None:
        self._lines: dict[str, deque[str]] = {}
        self._totals: dict[str, int] = {}

    def add(self, task: str, lines: Iterable[str]) -> bool:
        """Keep `lines` of `task`; True when what is kept changed."""
        buf = self._lines.get(task)
        if buf is None:
            buf = self._lines[task] = deque(maxlen=LOG_LINES_KEPT)
        before = len(buf)
        added = list(lines)
        buf.extend(added)
        self._totals[task] = self._totals.get(task, 0) + len(added)
        return len(buf) != before or buf.maxlen == before

    def lines(self, task: str) -> list[str]:
        return list(self._lines.get(task, ()))

    def since(self, task: str, seen: int) -> tuple[list[str], int]:
        """The lines of `task` added after the first `seen` ones, and how many were ever added.

        When more than LOG_LINES_KEPT lines arrived since `seen`, fewer lines than
        `total - seen` come back (the caller can say some were dropped).
        """
        buf = self._lines.get(task)
        total = self._totals.get(task, 0)
        if not buf or total <= seen:
            return [], total
        new = min(total - seen, len(buf))
        return list(islice(buf, len(buf) - new, None)), total

    def tasks(self) -> list[str]:
        return sorted(self._lines)
