"""Training steps decoded and gathered before they are applied (outside any lock).

`step_batches(events)` is the reducer's fast path: a task's consecutive `steps` events come as
one `StepBatch` (their losses as one matrix, by replica), so reading back a run of a million
steps is a few hundred array copies rather than a Python loop per step and replica.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from dtgui.core.events import STEP_KINDS, Event, StepRows, step_rows

GROUP_VALUES = 1 << 20  # step losses decoded before they are applied (one batch at most)


@dataclass
class StepBatch:
    """Consecutive `steps`/`step` events of one task, all of the same replicas, decoded."""

    task: str
    replica_ids: list[int]
    steps: np.ndarray  # float32 (n)
    by_replica: np.ndarray  # (replicas, n) float32, one contiguous row per replica
    all_finite: bool
    means: np.ndarray  # the mean over every replica of the run, by step (n)
    means_finite: np.ndarray | None  # where the means are finite (None: everywhere)
    rates: list[tuple[float, float]]  # (last step of a call, examples/s)
    rates_lr: list[tuple[float, float]]  # (last step of a call, learning rate)
    ends: list[tuple[float, float]]  # (last step of a call, its event time)
    epoch: int
    last_step: int
    last_loss: float | None  # the loss the last call reports (its last step's mean)
    t_first: float
    t_last: float


def decode_batch(group: list[tuple[Event, StepRows]]) -> StepBatch:
    last_event, last_rows = group[-1]
    steps = np.concatenate([rows.steps for _, rows in group]).astype(np.float32)
    losses = np.concatenate([rows.losses for _, rows in group])
    by_replica = np.ascontiguousarray(losses.T)
    means = np.concatenate([rows.means for _, rows in group])
    rates, rates_lr, ends = [], [], []
    epoch = 0
    for e, rows in group:
        end = float(rows.steps[-1])
        ends.append((end, e.t))
        rate, lr = e.data.get("examples_per_sec"), e.data.get("lr")
        if isinstance(rate, (int, float)):
            rates.append((end, float(rate)))
        if isinstance(lr, (int, float)):
            rates_lr.append((end, float(lr)))
        epoch = max(epoch, int(e.data.get("epoch", 0) or 0))
    last_loss = last_event.number("loss")
    if last_loss is None and len(last_rows.means):
        last_loss = float(last_rows.means[-1])
    times = [e.t for e, _ in group]
    finite = np.isfinite(means)
    return StepBatch(task=last_event.task, replica_ids=last_rows.replica_ids, steps=steps,
                     by_replica=by_replica, all_finite=bool(np.isfinite(by_replica).all()),
                     means=means, means_finite=None if finite.all() else finite, rates=rates, rates_lr=rates_lr, ends=ends, epoch=epoch,
                     last_step=int(last_rows.steps[-1]), last_loss=last_loss,
                     t_first=min(times), t_last=max(times))


def step_batches(events: Iterable[Event]) -> Iterator[Event | StepBatch]:
    """The events in the order to apply them, training steps decoded and gathered: a task's
    consecutive step events (of the same replicas, up to GROUP_VALUES losses held) come as one
    StepBatch; the other events come at once (a task's `started`, which may rewind its
    curves, after its steps before it)."""
    pending: dict[str, list[tuple[Event, StepRows]]] = {}
    held = 0
    for event in events:
        if event.kind in STEP_KINDS:
            rows = step_rows(event.data)
            if rows is None or not len(rows.steps):
                continue
            group = pending.setdefault(event.task, [])
            if group and group[-1][1].replica_ids != rows.replica_ids:
                yield decode_batch(pending.pop(event.task))
                group = pending.setdefault(event.task, [])
            group.append((event, rows))
            held += rows.losses.size
            if held >= GROUP_VALUES:
                for task in list(pending):
                    yield decode_batch(pending.pop(task))
                held = 0
            continue
        if event.kind == "started" and event.task in pending:
            yield decode_batch(pending.pop(event.task))
        yield event
    for task in list(pending):
        yield decode_batch(pending.pop(task))
