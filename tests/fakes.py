"""What tests share to stand in for a run: one `wait_for`, and events built the way the
training program writes them (parsed through the product's own `parse_line`)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from dtgui.core.events import SCHEMA_VERSION, Event, parse_line
from dtgui.worker import step_batch


def wait_for(condition: Callable[[], object], timeout: float, message: str = "",
             interval: float = 0.05) -> float:
    """Wait until `condition()` is true; return the seconds it took. Fails with `message`
    (and the time waited) when `timeout` seconds pass first."""
    start = time.monotonic()
    while not condition():
        waited = time.monotonic() - start
        assert waited < timeout, f"{message or 'timed out'} (waited {waited:.1f} s)"
        time.sleep(interval)
    return time.monotonic() - start


def event(kind: str, task: str = "worker:0", t: float = 1000.0, v: int = SCHEMA_VERSION,
          **fields: Any) -> Event:
    """One event as a reader parses it from a task's events file."""
    parsed = parse_line(json.dumps({"v": v, "kind": kind, "task": task, "t": t, **fields}))
    assert parsed is not None, kind
    return parsed


def step_losses(first: int, count: int, replicas: int = 2, seed: int = 0) -> np.ndarray:
    """Per-replica losses (rows: steps, columns: replicas) that fall like training's."""
    rng = np.random.default_rng(seed + first)
    steps = np.arange(first, first + count)[:, None]
    return (2.0 / np.sqrt(steps) + 0.1 * np.arange(replicas)
            + rng.normal(0, 0.05, (count, replicas))).astype(np.float32)


def steps_fields(first: int, losses: np.ndarray, replica_ids: list[int] | None = None,
                 epoch: int = 1, stride: int = 1, examples_per_sec: float = 500.0,
                 lr: float | None = None) -> dict[str, Any]:
    """The fields of a `steps` event (one training call) carrying `losses`."""
    means = losses.mean(axis=1)
    fields: dict[str, Any] = dict(
        first=first, count=len(losses), stride=stride, epoch=epoch,
        replica_ids=list(range(losses.shape[1])) if replica_ids is None else replica_ids,
        encoding=step_batch.ENCODING, losses=step_batch.encode(losses),
        means=step_batch.encode(means), loss=float(means[-1]),
        examples_per_sec=examples_per_sec)
    if lr is not None:
        fields["lr"] = lr
    return fields


def steps_event(first: int, count: int, replicas: int = 2, lr: float | None = None,
                task: str = "worker:0", epoch: int = 1) -> Event:
    """A `steps` event for steps first..first+count-1 with `step_losses`."""
    return event("steps", task, t=1000.0 + first + count,
                 **steps_fields(first, step_losses(first, count, replicas), epoch=epoch, lr=lr))


def started_event(replica_ids: list[int], steps: int = 100, task: str = "worker:0",
                  strategy: str = "mirrored", **fields: Any) -> Event:
    """The `started` event a task writes once its strategy is built."""
    return event("started", task, replicas=len(replica_ids), replica_ids=replica_ids,
                 steps=steps, strategy=strategy, **fields)
