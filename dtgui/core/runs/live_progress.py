"""How far a running run is, its newest loss and its best validation value so far, read from
its local events files without folding them (the Runs page's live rows of runs this app does not follow: kept training
by a watcher, started by the queue or by `dtgui run`).

`EventsProgress` reads only the bytes appended since its last look (from the last
TAIL_BYTES of each file the first time: a long run is not read whole), and keeps a handful of
numbers (each validation metric's best of the lines read): memory and time grow with the new
lines, not with the run's length. Its progress is a
`ScriptProgress` (what a script told, else the steps against the plan's), whose pace gives
the time left. Pure Python; it blocks on the disk: not on a UI thread.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from dtgui.core.curve_values import best_validation, better
from dtgui.core.events import Event, EventTail, as_number
from dtgui.core.run_tasks import task_key
from dtgui.core.runs.records import RunHistory, RunRecord
from dtgui.core.scripts.script_progress import ScriptProgress
from dtgui.worker.layout import EVENTS_GLOB, OUTPUT_DIR

TAIL_BYTES = 256 * 1024  # read of a file the first time: its newest steps are in there


def recent_offset(path: Path, tail: int = TAIL_BYTES) -> int:
    """Where the last `tail` bytes of `path` begin, moved to the start of a line."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if size <= tail:
                return 0
            f.seek(size - tail)
            chunk = f.read(tail)
    except OSError:
        return 0
    newline = chunk.find(b"\n")
    return size if newline < 0 else size - tail + newline + 1


class EventsProgress:
    """The progress and newest loss of the run in `folder`, from its events' new lines."""

    def __init__(self, folder: Path | str) -> None:
        self.output = Path(folder) / OUTPUT_DIR
        self.tails: dict[Path, EventTail] = {}
        self.steps = ScriptProgress(unit="step")  # dtgui's loop: its steps
        self.script = ScriptProgress()  # a script's own progress, when it tells one
        self.loss: float | None = None
        self.validation: dict[str, float] = {}  # each validation metric's best ("loss" too)
        self._main = ""  # the task whose start paces the run

    def read(self) -> None:
        """Take the lines appended since the last read."""
        for path in sorted(self.output.glob(EVENTS_GLOB)):
            tail = self.tails.get(path)
            if tail is None:
                tail = self.tails[path] = EventTail(path, recent_offset(path))
            for event in tail.read_new():
                self._add(event)

    def progress(self, started: float | None = None) -> ScriptProgress:
        """How far the run is; `started` (its record's start) paces it when its start was not
        among the lines read."""
        told = self.script if self.script.unit else self.steps
        if told.started_at is None and started:
            return replace(told, started_at=started)
        return replace(told)

    def _add(self, event: Event) -> None:
        kind = event.kind
        if kind == "started":
            total = event.get("steps")
            if isinstance(total, int) and total > 0:
                self.steps.total = total
            if not self._main or task_key(event.task) <= task_key(self._main):
                self._main = event.task
                self.steps.started_at = event.t
                self.script.start(event.t)
        elif kind == "steps":
            first, count = event.get("first"), event.get("count")
            stride = event.get("stride") or 1
            if isinstance(first, int) and isinstance(count, int) and isinstance(stride, int) \
                    and first + stride * (count - 1) >= self.steps.done:
                self.steps.done = first + stride * (count - 1)
                self.steps.done_at = event.t
                loss = event.number("loss")
                if loss is not None:
                    self.loss = loss
        elif kind == "progress" and event.task == (self._main or event.task):
            self.script.add(event)
        elif kind == "validation":
            values = {"loss": event.get("loss"), **(event.get("metrics") or {})}
            for name, value in values.items():
                number, key = as_number(value), str(name)
                if number is not None and better(key, number, self.validation.get(key)):
                    self.validation[key] = number
        elif kind == "finished":
            loss = event.number("loss")
            if loss is not None:
                self.loss = loss


@dataclass
class LiveFacts:
    """What a running run's row shows, read now."""

    record: RunRecord | None  # its record (None: unreadable now)
    progress: ScriptProgress
    loss: float | None
    best_val: tuple[str, float] | None  # (name, value): its best validation value so far


def read_live(folder: str, reader: EventsProgress) -> LiveFacts:
    """The run in `folder` now: its record (state, end) and `reader`'s new lines."""
    record = RunHistory.read(Path(folder))
    reader.read()
    return LiveFacts(record, reader.progress(record.created if record is not None else None),
                     reader.loss, best_validation(reader.validation))
