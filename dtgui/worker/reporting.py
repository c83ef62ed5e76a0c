"""The optional two-line API for a user's own script (docs/own-scripts.md):

    from dtgui_worker import report
    report(step, loss=loss, accuracy=acc)              # the task's loss and any metrics
    report(step, replica_losses=[l0, l1])               # one loss per local replica

and ``model.fit(..., callbacks=[dtgui_worker.ReportCallback()])`` for Keras. Under dtgui
(DTGUI_EVENTS_FILE set) each call appends a ``step`` event (per-replica losses: the main loss
plot) and a ``scalar`` event per metric to the task's events file; elsewhere it does nothing,
so the script still runs by hand. Importing this module does not import TensorFlow.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from .events import EventWriter
from .strategies import Strategy

_writer: EventWriter | None = None
_lock = threading.Lock()


def _events() -> EventWriter | None:
    global _writer
    path = os.environ.get("DTGUI_EVENTS_FILE", "")
    if not path:
        return None
    with _lock:
        if _writer is None:
            _writer = EventWriter(path, os.environ.get("DTGUI_TASK", "worker:0"))
        return _writer


def _number(value: Any) -> float | None:
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
    losses = [_number(v) for v in (replica_losses if replica_losses is not None else ())]
    mean = _number(loss) if loss is not None else None
    if mean is None and losses and all(v is not None for v in losses):
        mean = sum(losses) / len(losses)  # type: ignore[arg-type]
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
        number = _number(value)
        if number is not None:
            events.emit("scalar", tag=str(name), step=step, value=number, source="report")


def report_epoch(epoch: int, step: int, **metrics: Any) -> None:
    """An epoch's metrics: an ``epoch`` event (loss/accuracy in the header) and scalars."""
    events = _events()
    if events is None:
        return
    numbers = {k: _number(v) for k, v in metrics.items()}
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
