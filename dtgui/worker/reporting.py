"""The optional two-line API for a user's own script (docs/own-scripts.md):

    from dtgui_worker import report
    report(step, loss=loss, accuracy=acc)              # the task's loss and any metrics
    report(step, replica_losses=[l0, l1])               # one loss per local replica

and ``model.fit(..., callbacks=[dtgui_worker.ReportCallback()])`` for Keras. Under dtgui
(DTGUI_EVENTS_FILE set) each call appends a ``step`` event (per-replica losses: the main loss
plot) and a ``scalar`` event per metric to the task's events file; elsewhere it does nothing,
so the script still runs by hand. Importing this module does not import TensorFlow.

Where the script's step time goes (a ``split`` event every few seconds): the time between
report() calls per step, the time report() itself takes (dtgui's reporting) and, when the
script reads its batches through ``for batch in dtgui_worker.timed(dataset):``, the time it
waited for them (input wait). The rest is the script's compute, communication included
(dtgui cannot tell them apart inside a script).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from .events import EventWriter
from .strategies import Strategy

_writer: EventWriter | None = None
_lock = threading.Lock()
T = TypeVar("T")
SPLIT_EVERY_SECONDS = 5.0
FIRST_SPLIT_SECONDS = 2.0


class ScriptTiming:
    """A script's step time from its report() calls (see the module doc)."""

    def __init__(self) -> None:
        self.reset_window(None)
        self.last: tuple[float, int] | None = None  # (time, step) of the last report()
        self.timed = False  # the script reads its data through timed()
        self.splits = 0
        self.training_seconds = 0.0

    def reset_window(self, now: float | None) -> None:
        self.wall = self.input = self.reporting = 0.0
        self.steps = 0
        self.since = now

    def input_wait(self, seconds: float) -> None:
        self.input += seconds
        self.timed = True

    def stepped(self, step: int, now: float) -> None:
        if self.last is None or self.since is None:
            self.reset_window(now)  # what came before the first report is no step
        elif step > self.last[1]:
            self.wall += now - self.last[0]
            self.steps += step - self.last[1]
            self.training_seconds += now - self.last[0]
        self.last = (now, step)

    def split_due(self, now: float) -> bool:
        wait = SPLIT_EVERY_SECONDS if self.splits else FIRST_SPLIT_SECONDS
        return self.steps > 0 and self.since is not None and now - self.since >= wait

    def split_fields(self, now: float) -> dict[str, Any]:
        steps = self.steps
        waiting = min(self.input, self.wall) / steps
        reporting = min(self.reporting, self.wall - min(self.input, self.wall)) / steps
        compute = max(0.0, self.wall / steps - waiting - reporting)
        measured = (["input"] if self.timed else []) + ["compute", "reporting"]
        assert self.last is not None
        fields = {"step": self.last[1], "steps": steps, "method": "report",
                  "measured": measured, "input": round(waiting, 7),
                  "compute": round(compute, 7), "communication": 0.0,
                  "reporting": round(reporting, 7),
                  "training_seconds": round(self.training_seconds, 4)}
        self.splits += 1
        self.reset_window(now)
        return fields


_timing = ScriptTiming()


def timed(iterable: Iterable[T]) -> Iterator[T]:
    """What `iterable` yields, timing how long each item took to come: the script's input
    wait in the split dtgui shows (``for batch in timed(dataset):``)."""
    iterator = iter(iterable)
    while True:
        began = time.perf_counter()
        try:
            item = next(iterator)
        except StopIteration:
            return
        _timing.input_wait(time.perf_counter() - began)
        yield item


def _events() -> EventWriter | None:
    global _writer
    path = os.environ.get("DTGUI_EVENTS_FILE", "")
    if not path:
        return None
    with _lock:
        if _writer is None:
            _writer = EventWriter(path, os.environ.get("DTGUI_TASK", "worker:0"))
        return _writer


def _as_float(value: Any) -> float | None:
    """A float from a Python/numpy number or an eager tensor (None when it is not one)."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    if hasattr(value, "item"):
        try:
            value = value.item()
        except (TypeError, ValueError):
            return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def replica_ids(count: int) -> list[int]:
    """Global ids of this task's `count` replicas: a MultiWorkerMirrored worker i holds
    i*count .. i*count+count-1; a single task or the ParameterServer coordinator 0..count-1."""
    strategy = Strategy.named(os.environ.get("DTGUI_STRATEGY", ""))
    if os.environ.get("DTGUI_TASK_TYPE", "worker") != "worker" or \
            (strategy is not None and strategy.has_coordinator):
        base = 0
    else:
        base = int(os.environ.get("DTGUI_TASK_INDEX", "0") or 0) * count
    return list(range(base, base + count))


def report(step: int, loss: Any = None, *, replica_losses: Any = None,
           epoch: int | None = None, **metrics: Any) -> None:
    """Report training step `step` (counted from 1). Cheap: one small line a call."""
    events = _events()
    if events is None:
        return
    began = time.perf_counter()
    _timing.stepped(int(step), began)
    losses = [_as_float(v) for v in (replica_losses if replica_losses is not None else ())]
    mean = _as_float(loss) if loss is not None else None
    finite = [v for v in losses if v is not None]
    if mean is None and losses and len(finite) == len(losses):
        mean = sum(finite) / len(finite)
    step = int(step)
    if losses or mean is not None:
        if not losses:
            losses = [mean]
        fields: dict[str, Any] = {"step": step, "replica_losses": losses,
                                  "replica_ids": replica_ids(len(losses)), "loss": mean}
        if epoch is not None:
            fields["epoch"] = int(epoch)
        events.emit("step", **fields)
    for name, value in metrics.items():
        number = _as_float(value)
        if number is not None:
            events.emit("scalar", tag=str(name), step=step, value=number, source="report")
    now = time.perf_counter()
    _timing.reporting += now - began
    if _timing.split_due(now):
        events.emit("split", **_timing.split_fields(now))


def report_epoch(epoch: int, step: int, **metrics: Any) -> None:
    """An epoch's metrics: an ``epoch`` event (loss/accuracy in the header) and scalars."""
    events = _events()
    if events is None:
        return
    numbers = {k: _as_float(v) for k, v in metrics.items()}
    events.emit("epoch", epoch=int(epoch), steps=int(step),
                **{k: v for k, v in numbers.items() if v is not None})
    for name, value in numbers.items():
        if value is not None:
            events.emit("scalar", tag=f"epoch/{name}", step=int(epoch), value=value,
                        source="report")


def make_report_callback_class() -> type:
    """A Keras callback class of the Keras the script uses (tf.keras follows
    TF_USE_LEGACY_KERAS). Built on first use: TensorFlow is imported only then."""
    import tensorflow as tf

    class ReportCallback(tf.keras.callbacks.Callback):
        """Reports every batch's loss and metrics, and each epoch's, to dtgui."""

        def __init__(self, every: int = 1) -> None:
            super().__init__()
            self.every = max(1, int(every))
            self.step = 0
            self.epoch = 0

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self.epoch = epoch + 1

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            self.step += 1
            if self.step % self.every:
                return
            logs = dict(logs or {})
            loss = logs.pop("loss", None)
            report(self.step, loss=loss, epoch=self.epoch,
                   **{f"batch/{k}": v for k, v in logs.items()})

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            report_epoch(epoch + 1, self.step, **dict(logs or {}))

    return ReportCallback
