"""What tests share to stand in for a run: one `wait_for`, and events built the way the
training program writes them (parsed through the product's own `parse_line`)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dtgui.core.bundle import Bundle
from dtgui.core.events import Event, parse_line
from dtgui.core.metrics import RunMetrics
from dtgui.core.plan import Plan
from dtgui.core.run_state import RunState
from dtgui.core.runs import RunRecord
from dtgui.launch.run_source import BundledRun
from dtgui.worker import step_batch
from dtgui.worker.events import SCHEMA_VERSION  # the version the worker writes


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


class FakeRun(BundledRun):
    """A whole run as the UI follows it (`dtgui.launch.run_source.RunSource`), moved by hand:
    set `state`, `message`, `restarts`, `final_loss`, feed `metrics`, then `end(...)`."""

    def __init__(self, metrics: RunMetrics | None = None, plan: Plan | None = None,
                 path: Path | str = "fake-run", max_restarts: int = 0,
                 record: RunRecord | None = None) -> None:
        plan = plan or Plan(run_name="fake-run")
        self.metrics = metrics or RunMetrics(plan.steps)
        self.bundle = Bundle(Path(path), plan)
        self.state = RunState.RUNNING
        self.message = ""
        self.finished = False
        self.restarts = 0
        self.max_restarts = max_restarts
        self.final_loss: float | None = None
        self.record = record
        self.stop_calls = 0  # request_stop() calls
        self.detached = False

    def request_stop(self) -> None:
        self.stop_calls += 1
        if not self.finished:
            self.state = RunState.STOPPING

    def detach(self) -> None:
        self.detached = True

    def restart(self, message: str = "restarting every task from the last checkpoint") -> None:
        self.restarts += 1
        self.message = message

    def end(self, state: str = "finished", message: str = "",
            final_loss: float | None = None) -> None:
        """End the run as the controller does: its state and message first, then finished."""
        self.message = message or f"run {state}"
        if final_loss is not None:
            self.final_loss = final_loss
        self.state = RunState(state)
        self.finished = True
