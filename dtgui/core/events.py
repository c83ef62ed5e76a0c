"""The event schema (docs/bundle-format.md) and a reader that follows an events file by byte offset.

Schema 2 reports training steps in batches (`steps`: one event per training call, its losses
in the compact form of `dtgui.worker.step_batch`); schema 1 files (one `step` event a step)
are still read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dtgui.worker import step_batch

READABLE_VERSIONS = frozenset({1, 2})  # of the events' "v" (the worker writes its SCHEMA_VERSION)
KINDS = frozenset(
    {"started", "step", "steps", "epoch", "device", "checkpoint", "log", "finished", "failed",
     "validation", "model_saved",
     "scalar",  # scalar: a number a user's own script logs (dtgui.core.scalars)
     "progress",  # how far a user's own script says it is (dtgui.core.scripts.script_progress)
     "split"}  # where a task's step time goes (dtgui.core.measure.bottleneck)
)
STEP_KINDS = ("step", "steps")  # events that report training steps (schema 1, schema 2)


@dataclass(frozen=True)
class Event:
    kind: str
    task: str
    t: float
    data: dict[str, Any]

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def number(self, key: str) -> float | None:
        """A field as a number (`as_number`)."""
        return as_number(self.data.get(key))


def as_number(value: object) -> float | None:
    """A value of an event as a number; None when it is missing or not one (a bool is not)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def parse_line(line: str | bytes) -> Event | None:
    """One JSON line to an Event; None for a line that is not a dtgui event of this schema."""
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict) or obj.get("v") not in READABLE_VERSIONS:
        return None
    kind = obj.get("kind")
    if kind not in KINDS:
        return None
    try:
        t = float(obj.get("t", 0.0))
    except (TypeError, ValueError):
        t = 0.0
    return Event(kind=kind, task=str(obj.get("task", "?")), t=t, data=obj)


@dataclass(frozen=True)
class StepRows:
    """The training steps one event reports: step numbers (n), each replica's loss (n, r)
    with the global ids of those replicas, and the mean over every replica of the run (n)."""

    steps: np.ndarray
    replica_ids: list[int]
    losses: np.ndarray
    means: np.ndarray


def step_rows(data: dict[str, Any]) -> StepRows | None:
    """The steps of a `steps` event (schema 2) or a `step` event (schema 1); None when the
    event is damaged."""
    try:
        if data.get("kind") == "step":
            raw = data.get("replica_losses") or []
            losses = np.array([[x if isinstance(x, (int, float)) else np.nan for x in raw]],
                              dtype=np.float32)
            ids = [int(i) for i in data.get("replica_ids") or range(losses.shape[1])]
            mean = data.get("loss")
            means = np.array([mean if isinstance(mean, (int, float)) else np.nan], np.float32)
            return StepRows(np.array([int(data.get("step", 0))]), ids, losses, means)
        count = int(data["count"])
        ids = [int(i) for i in data["replica_ids"]]
        if data.get("encoding") != step_batch.ENCODING or count < 0:
            return None
        first, stride = int(data["first"]), max(1, int(data.get("stride", 1)))
        losses = step_batch.decode(data["losses"], count, len(ids))
        means = step_batch.decode(data["means"], count).reshape(count)
    except (KeyError, TypeError, ValueError):
        return None
    return StepRows(first + stride * np.arange(count, dtype=np.int64), ids, losses, means)


class LineBuffer:
    """Complete lines of a file read from a byte offset in chunks; keeps the offset. The one
    way dtgui follows a growing file (events and logs, here or over SSH)."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset

    def take(self, chunk: bytes, at: int | None = None) -> bytes:
        """Complete lines of `chunk` (read from `at`, default the current offset); advances
        the offset past them. A partial last line is read again next time."""
        if at is not None and at != self.offset:
            return b""  # a stale answer: ignore it
        end = chunk.rfind(b"\n")
        if end < 0:
            return b""
        self.offset += end + 1
        return chunk[: end + 1]


def parse_events(raw: bytes, shift: float = 0.0) -> list[Event]:
    """The events of complete lines (others skipped); `shift` corrects a remote clock."""
    out = []
    for line in raw.splitlines():
        event = parse_line(line)
        if event is not None:
            if shift:
                event = Event(event.kind, event.task, event.t - shift, event.data)
            out.append(event)
    return out


class EventTail:
    """Reads the events appended to a file since the last call (from a byte offset).

    A partly written last line is kept until its newline arrives, so nothing is parsed twice
    or lost; the offset can be saved and used to resume after a restart.
    """

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = Path(path)
        self._lines = LineBuffer(offset)

    @property
    def offset(self) -> int:
        return self._lines.offset

    def read_new(self, max_bytes: int = 8 * 1024 * 1024) -> list[Event]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read(max_bytes)
                while b"\n" not in chunk and len(chunk) >= max_bytes:  # a line longer than that
                    more = f.read(max_bytes)
                    if not more:
                        break
                    chunk += more
        except FileNotFoundError:
            return []
        return parse_events(self._lines.take(chunk))


def read_all(path: Path) -> list[Event]:
    tail = EventTail(path)
    events: list[Event] = []
    while batch := tail.read_new():
        events.extend(batch)
    return events


TAIL_BYTES = 65536  # the end of an events file `last_step` reads: the last events of a run


def last_step(path: Path, tail_bytes: int = TAIL_BYTES) -> int | None:
    """The furthest step the last events of a task's events file report (its `steps`,
    `step` and `progress` events), None when they report none: what a run still training
    has done, read without reading all its events."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - tail_bytes))
            raw = f.read()
    except OSError:
        return None
    if size > tail_bytes:
        raw = raw.partition(b"\n")[2]  # the first line is cut
    best: int | None = None
    for line in raw.splitlines():
        event = parse_line(line)
        if event is None:
            continue
        step: object = None
        if event.kind == "steps":
            first, count, stride = (event.get(k) for k in ("first", "count", "stride"))
            if isinstance(first, int) and isinstance(count, int) and count > 0:
                step = first + (count - 1) * (stride if isinstance(stride, int) else 1)
        elif event.kind in ("step", "progress"):
            step = event.get("step")
        if isinstance(step, int) and (best is None or step > best):
            best = step
    return best
