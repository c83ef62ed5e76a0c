"""Each task's last log lines (its log file's and its `log` events'), and how many it ever had.

Only the last LOG_LINES_KEPT lines of a task are kept, so a run that floods its log holds a
bounded amount; the count lets a reader that follows the lines say when some were dropped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from itertools import islice

LOG_LINES_KEPT = 5000


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
