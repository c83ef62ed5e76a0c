"""The `scalar` events of a run (docs/bundle-format.md): every number a user's script logs, per task
and tag, as plot-ready series. Pure Python (no Qt).

`LiveRun` hands each `scalar` event to `ScalarStore.add` (under its own lock); the dashboard
reads `snapshot()` from the UI thread. A series whose step goes back (a script restarted from
its checkpoint) continues from there instead of drawing a line back.

Each series knows what its x counts (`axis`: "step", "epoch", or "line" for printed lines that
give no step) and where it came from (`source`: "printed" for the script's printed lines). A
printed series is not shown while the same task gives the same metric another way (TensorBoard
files, `report()`'s scalars, or its training steps for the loss: `given_elsewhere`):
`train/epoch_loss` and a printed `loss` are one metric (printed_metrics.metric_name), taken
once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from dtgui.core.events import Event
from dtgui.worker.printed_metrics import AXES, metric_name
from dtgui.worker.script_env import is_loss_tag, is_step_tag

__all__ = ["ScalarStore", "is_loss_tag", "is_step_tag"]

@dataclass
class ScalarSeries:
    steps: np.ndarray
    values: np.ndarray
    size: int = 0
    axis: str = "step"  # AXES
    printed: bool = False

    @classmethod
    def empty(cls, axis: str = "step", printed: bool = False) -> ScalarSeries:
        return cls(np.empty(64, np.float64), np.empty(64, np.float64), axis=axis,
                   printed=printed)

    def add(self, step: float, value: float) -> None:
        if self.size and step <= self.steps[self.size - 1]:  # restarted: continue from there
            keep = int(np.searchsorted(self.steps[: self.size], step, side="left"))
            self.steps, self.values = self.steps.copy(), self.values.copy()
            self.size = keep
        if self.size == len(self.steps):
            grow = 2 * len(self.steps)
            self.steps = np.concatenate([self.steps[: self.size], np.empty(grow - self.size)])
            self.values = np.concatenate([self.values[: self.size], np.empty(grow - self.size)])
        self.steps[self.size] = step
        self.values[self.size] = value
        self.size += 1

    def view(self) -> tuple[np.ndarray, np.ndarray]:
        return self.steps[: self.size], self.values[: self.size]


class ScalarStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str], ScalarSeries] = {}  # (tag, task) -> series
        self._taken: set[tuple[str, str]] | None = None  # (metric name, task) not printed
        self._elsewhere: set[tuple[str, str]] = set()  # given by other events (report()'s loss)
        self.version = 0

    def add(self, event: Event) -> tuple[int | None, int | None]:
        """Store one `scalar` event; returns (training step, epoch) for the progress: its step
        when the tag counts training steps, else the epoch it ends (Keras counts epochs from
        0); None when it is not a valid scalar."""
        tag, step, value = event.get("tag"), event.get("step"), event.get("value")
        if not isinstance(tag, str) or not isinstance(step, (int, float)) \
                or not isinstance(value, (int, float)) or isinstance(value, bool):
            return None, None
        printed = event.get("source") == "printed"
        axis = event.get("axis")
        if axis not in AXES:
            axis = "step" if is_step_tag(tag) else "epoch"
        with self._lock:
            key = (tag, event.task)
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = ScalarSeries.empty(axis, printed)
                self._taken = None
            series.add(float(step), float(value))
            self.version += 1
        if printed:  # its `progress` events tell the epoch
            return (int(step), None) if axis == "step" else (None, 0)
        return (int(step), None) if axis == "step" else (None, int(step) + 1)

    def _shown(self) -> dict[tuple[str, str], ScalarSeries]:
        """The series to show: a printed one only where no other source gives its metric."""
        if self._taken is None:
            self._taken = {(metric_name(tag), task) for (tag, task), s in self._series.items()
                           if not s.printed} | self._elsewhere
        taken = self._taken
        return {key: s for key, s in self._series.items()
                if not s.printed or (metric_name(key[0]), key[1]) not in taken}

    def given_elsewhere(self, task: str, name: str) -> None:
        """`task` gives metric `name` by other events (report()'s training steps give its
        loss): a printed one of that name is not shown."""
        key = (metric_name(name), task)
        with self._lock:
            if key not in self._elsewhere:
                self._elsewhere.add(key)
                self._taken = None
                self.version += 1

    def tags(self) -> list[str]:
        with self._lock:
            return sorted({tag for tag, _ in self._shown()})

    def axes(self) -> dict[str, str]:
        """tag -> what its x counts (AXES; the first task's when tasks differ)."""
        with self._lock:
            out: dict[str, str] = {}
            for (tag, _), series in sorted(self._shown().items()):
                out.setdefault(tag, series.axis)
            return out

    def snapshot(self) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
        """tag -> task -> (steps, values): views that later additions never overwrite."""
        with self._lock:
            out: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
            for (tag, task), series in sorted(self._shown().items()):
                out.setdefault(tag, {})[task] = series.view()
            return out

    def loss_series(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """task -> its training-loss series (the most detailed loss tag it logs: per step
        rather than per epoch), for the main loss plot of a script that reports no steps."""
        with self._lock:
            return {task: self._series[(tag, task)].view()
                    for task, tag in sorted(self._loss_tags().items())}

    def loss_tags(self) -> dict[str, str]:
        """task -> the tag of its training-loss series (see `loss_series`)."""
        with self._lock:
            return self._loss_tags()

    def _loss_tags(self) -> dict[str, str]:
        best: dict[str, tuple[int, str]] = {}
        for (tag, task), series in self._shown().items():
            if not is_loss_tag(tag):
                continue
            rank = (2 if series.axis == "step" else 1) * 1_000_000 + series.size
            if task not in best or rank > best[task][0]:
                best[task] = (rank, tag)
        return {task: tag for task, (_, tag) in best.items()}
