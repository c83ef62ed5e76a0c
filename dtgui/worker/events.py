"""JSON-lines event writer (schema version 1). No TensorFlow here."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from typing import Any

SCHEMA_VERSION = 1


def _clean(value: Any) -> Any:
    """Make a value JSON-safe: NaN/inf floats become None, numpy scalars become Python."""
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
    return value


class EventWriter:
    """Appends one JSON object per line to ``path``; flushed after each line; thread-safe."""

    def __init__(self, path: str | os.PathLike[str], task: str) -> None:
        self.path = os.fspath(path)
        self.task = task
        parent = os.path.dirname(self.path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        self._lock = threading.Lock()
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        event: dict[str, Any] = {"v": SCHEMA_VERSION, "kind": kind, "task": self.task,
                                 "t": time.time()}
        event.update(_clean(fields))
        line = json.dumps(event, separators=(",", ":"), allow_nan=False)
        with self._lock:
            if self._file.closed:
                return event
            self._file.write(line + "\n")
            self._file.flush()
        return event

    def log(self, message: str, level: str = "info") -> None:
        self.emit("log", level=level, message=message)

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
