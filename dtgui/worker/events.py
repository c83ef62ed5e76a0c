"""JSON-lines event writer (schema version 2, docs/bundle-format.md). No TensorFlow here.

Two processes of a task (the supervisor and the training process) append to the same file:
each event is a single ``os.write`` on an O_APPEND descriptor, so lines never interleave.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from typing import Any

SCHEMA_VERSION = 2


def _clean(value: Any) -> Any:
    """Make a value JSON-safe: NaN/inf floats become None, numpy scalars become Python."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        try:
            return _clean(value.item())
        except (TypeError, ValueError):
            return str(value)
    return str(value)


class EventWriter:
    """Appends one JSON object per line to ``path``; unbuffered; thread-safe."""

    def __init__(self, path: str | os.PathLike[str], task: str) -> None:
        self.path = os.fspath(path)
        self.task = task
        parent = os.path.dirname(self.path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        self._lock = threading.Lock()
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        event: dict[str, Any] = {"v": SCHEMA_VERSION, "kind": kind, "task": self.task,
                                 "t": time.time()}
        event.update(_clean(fields))
        data = (json.dumps(event, separators=(",", ":"), allow_nan=False) + "\n").encode()
        with self._lock:
            if self._fd is None:
                return event
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        return event

    def log(self, message: str, level: str = "info") -> None:
        self.emit("log", level=level, message=message)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
