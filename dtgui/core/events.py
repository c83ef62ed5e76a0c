"""The event schema (README "Events") and a reader that follows an events file by byte offset."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
KINDS = frozenset(
    {"started", "step", "epoch", "device", "checkpoint", "log", "finished", "failed",
     "scalar"}  # scalar: a number a user's own script logs (dtgui.core.scalars)
)


@dataclass(frozen=True)
class Event:
    kind: str
    task: str
    t: float
    data: dict[str, Any]

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


def parse_line(line: str | bytes) -> Event | None:
    """One JSON line to an Event; None for a line that is not a dtgui event of this schema."""
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict) or obj.get("v") != SCHEMA_VERSION:
        return None
    kind = obj.get("kind")
    if kind not in KINDS:
        return None
    try:
        t = float(obj.get("t", 0.0))
    except (TypeError, ValueError):
        t = 0.0
    return Event(kind=kind, task=str(obj.get("task", "?")), t=t, data=obj)


class EventTail:
    """Reads the complete lines appended to a file since the last call (from a byte offset).

    A partly written last line is kept until its newline arrives, so nothing is parsed twice
    or lost; the offset can be saved and used to resume after a restart.
    """

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = Path(path)
        self.offset = offset

    def read_new(self, max_bytes: int = 8 * 1024 * 1024) -> list[Event]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read(max_bytes)
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        events = []
        for raw in chunk[: end + 1].splitlines():
            event = parse_line(raw)
            if event is not None:
                events.append(event)
        return events


def read_all(path: Path) -> list[Event]:
    tail = EventTail(path)
    events: list[Event] = []
    while batch := tail.read_new():
        events.extend(batch)
    return events
