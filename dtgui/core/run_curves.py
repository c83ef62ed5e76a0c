"""The one reducer of a run's events into curves (pure Python + numpy, no Qt).

`RunCurves` folds the events of every task of a run into what is plotted and summarised:
each replica's training loss and the run's mean loss by step, each task's throughput, the
validation loss and metrics, the learning rate, a script's scalars, the wall time of every
point, and the final loss. A task restarted from a checkpoint rewinds its curves to the
resumed step (the steps after it are trained again) instead of drawing them twice.

The live dashboard (`dtgui.core.live_run.LiveRun`, which holds one under its lock), Compare
(`dtgui.core.runs.compare`), the run history and the CLI all read runs through it, so they show the
same curves and the same final loss.

`step_batches(events)` is the fast path: training steps are decoded and gathered into
`StepBatch`es (consecutive calls of one task) before they are applied, so reading back a run
of a million steps is a few hundred array copies rather than a Python loop per step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np

from dtgui.core.events import STEP_KINDS, Event, StepRows, read_all, step_rows
from dtgui.core.measure.bottleneck import (
    SPLIT_KIND,
    WINDOW_SAMPLES,
    WINDOW_SPLITS,
    CpuLoad,
    StepSplit,
    cpu_load,
    deferred_until,
    window_split,
)
from dtgui.core.measure.device_use import DeviceUse
from dtgui.core.measure.memory import MemoryPeaks
from dtgui.core.scalars import ScalarStore, is_loss_tag
from dtgui.core.scripts.script_progress import ScriptProgress
from dtgui.worker.layout import EVENTS_GLOB, OUTPUT_DIR

K = TypeVar("K")
GROUP_VALUES = 1 << 20  # step losses decoded before they are applied (one batch at most)
TASK_ORDER = {"chief": 0, "worker": 1, "ps": 2, "evaluator": 3}
# validation metrics where lower is better (the others, such as accuracy, higher is better)
LOWER_IS_BETTER = ("loss", "error", "mae", "mse", "rmse", "mape", "msle", "hinge",
                   "crossentropy", "perplexity")


def task_key(task: str) -> tuple[int, int, str]:
    """Tasks in the order that names the run's main one first: chief, worker:0, worker:1..."""
    kind, _, index = task.partition(":")
    return TASK_ORDER.get(kind, 9), int(index) if index.isdigit() else 0, task


# -- best values ------------------------------------------------------------------------------

def lower_is_better(metric: str) -> bool:
    name = metric.lower()
    return any(word in name for word in LOWER_IS_BETTER)


def best_index(values: np.ndarray, metric: str) -> int | None:
    """Where a metric's curve is best (the first such point), None if it has no finite value."""
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)
    if not finite.any():
        return None
    masked = np.where(finite, values, np.inf if lower_is_better(metric) else -np.inf)
    return int(np.argmin(masked) if lower_is_better(metric) else np.argmax(masked))


def best_point(steps: np.ndarray, values: np.ndarray, metric: str) -> tuple[float, int] | None:
    """(best value, its step) of a metric's curve; None when it has no finite value."""
    i = best_index(values, metric)
    return None if i is None else (float(values[i]), int(steps[i]))


def preferred_metric(names: Sequence[str]) -> str:
    """The validation metric to show first: accuracy when there is one."""
    for name in names:
        if name == "accuracy":
            return name
    return names[0] if names else ""


def median_throughput(throughput: dict[str, tuple[np.ndarray, np.ndarray]]) -> float | None:
    """The run's examples/s: each task counts its own examples, so the sum of the tasks'
    median rates (None when no task reported one)."""
    medians = []
    for _, ys in throughput.values():
        rates = np.asarray(ys, dtype=np.float64)
        rates = rates[np.isfinite(rates) & (rates > 0)]
        if len(rates):
            medians.append(float(np.median(rates)))
    return sum(medians) if medians else None


# -- series -----------------------------------------------------------------------------------

class Series:
    """An append-only (x, y) series backed by numpy arrays that grow geometrically.

    Views handed out (`view`) are never written under the holder: appends go past their end
    and a growth or a rewind (`keep_up_to`) moves to new arrays. float32 halves the memory
    of long loss curves (the training program computes them in float32).
    """

    def __init__(self, capacity: int = 1024, dtype: type = np.float64) -> None:
        self._x: np.ndarray = np.empty(max(1, capacity), dtype=dtype)
        self._y: np.ndarray = np.empty(max(1, capacity), dtype=dtype)
        self.size = 0

    def reserve(self, capacity: int) -> None:
        """Room for `capacity` points in all (untouched memory costs nothing until written)."""
        if capacity > len(self._x):
            self._grow(capacity)

    def _grow(self, needed: int) -> None:
        capacity = max(needed, 2 * len(self._x))
        x = np.empty(capacity, dtype=self._x.dtype)
        y = np.empty(capacity, dtype=self._y.dtype)
        x[: self.size] = self._x[: self.size]
        y[: self.size] = self._y[: self.size]
        self._x, self._y = x, y

    def append(self, x: float, y: float) -> None:
        if self.size == len(self._x):
            self._grow(self.size + 1)
        self._x[self.size] = x
        self._y[self.size] = y
        self.size += 1

    def extend(self, xs: np.ndarray, ys: np.ndarray) -> None:
        n = len(xs)
        if n == 0:
            return
        if self.size + n > len(self._x):
            self._grow(self.size + n)
        self._x[self.size: self.size + n] = xs
        self._y[self.size: self.size + n] = ys
        self.size += n

    def keep_up_to(self, x: float, *, inclusive: bool = True) -> None:
        """Drop the points after `x` (at and after it when not `inclusive`; x grows along
        the series), in new arrays so that the views already handed out keep their points."""
        keep = int(np.searchsorted(self._x[: self.size], x, side="right" if inclusive else "left"))
        if keep < self.size:
            self._x, self._y = self._x.copy(), self._y.copy()
            self.size = keep

    def view(self) -> tuple[np.ndarray, np.ndarray]:
        return self._x[: self.size], self._y[: self.size]

    @property
    def last(self) -> float | None:
        return float(self._y[self.size - 1]) if self.size else None

    @property
    def last_x(self) -> float | None:
        return float(self._x[self.size - 1]) if self.size else None


def series_of(series: dict[K, Series], key: K) -> Series:
    """series[key], made empty the first time (without building one each call)."""
    found = series.get(key)
    if found is None:
        found = series[key] = Series()
    return found


def _empty() -> np.ndarray:
    return np.empty(0, dtype=np.float64)


@dataclass
class Curve:
    """A curve by step, with the wall time of each point (seconds since the run's first
    event)."""

    steps: np.ndarray = field(default_factory=_empty)
    values: np.ndarray = field(default_factory=_empty)
    seconds: np.ndarray = field(default_factory=_empty)

    def __len__(self) -> int:
        return len(self.steps)


# -- decoding training steps (outside any lock) -----------------------------------------------

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


def _float_or_none(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


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
    last_loss = _float_or_none(last_event.get("loss"))
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


# -- the reducer ------------------------------------------------------------------------------

class RunCurves:
    """A run's curves, folded from its events in order (not thread-safe: `LiveRun` holds
    one under its lock; Compare and the history read a bundle into one of their own).

    The run's mean loss and its final loss come from its main task: the first, in task
    order, that reported training (the ParameterServer chief, worker 0 otherwise); the mean
    over every replica is the same on every worker.
    """

    def __init__(self, total_steps: int = 0) -> None:
        self.total_steps = total_steps
        self.replica_loss: dict[int, Series] = {}
        self.throughput: dict[str, Series] = {}
        self.validation: dict[str, Series] = {}
        self.learning_rate = Series()
        self.scalars = ScalarStore()  # `scalar` events: a user's script's own numbers
        self.script_progress = ScriptProgress()  # the main task's `progress` events
        self.memory = MemoryPeaks()  # `device` events: each task's peak memory
        self.device_use = DeviceUse()  # `device` events: utilisation in training, traffic
        self.gradient_bytes = 0  # what a step's all-reduce carries (`started` events)
        # task -> where its step time went over its last WINDOW_SPLITS splits (window_split)
        self.splits: dict[str, StepSplit] = {}
        self._split_window: dict[str, deque[StepSplit]] = {}
        # task -> training seconds from which it will be measured (not measured yet)
        self.split_deferred: dict[str, float] = {}
        # task -> its machine's CPU, (busy %, the task's own %), its last WINDOW_SAMPLES samples
        self._cpu: dict[str, deque[tuple[float, float]]] = {}
        self._cpu_host: dict[str, str] = {}  # task -> the name of its machine
        self.versions: dict[str, str] = {}  # the training program's (TensorFlow, Keras...)
        self.t_first: float | None = None
        self.t_last: float | None = None
        self._loss_task = ""  # the main task (see the class doc)
        self._mean_loss = Series(dtype=np.float32)  # the main task's mean loss by step
        self._ends: dict[str, Series] = {}  # task -> (step, time) at each call's end
        self._validated_at = Series()  # (step, time) of each validation kept
        self._loss_scalar_at: dict[tuple[str, str], Series] = {}  # (tag, task) -> (step, time)
        self._trained_to: dict[str, int] = {}  # task -> the last step it trained
        self._last_loss: dict[str, float] = {}  # task -> the loss it reported last
        self._finished_loss: dict[str, float] = {}  # task -> the loss its `finished` gave
        self._progress_task = ""  # the first task in task order that started
        self._printed_finish: set[str] = set()  # tasks whose `finished` loss was printed

    # -- folding ----------------------------------------------------------------------------
    def add_events(self, events: Iterable[Event]) -> None:
        """Fold events in order (the whole of a bundle, or what a poll read)."""
        for item in step_batches(events):
            if isinstance(item, StepBatch):
                self.add_steps(item)
            else:
                self.add_event(item)

    def note_time(self, t: float) -> None:
        if self.t_first is None or t < self.t_first:
            self.t_first = t
        if self.t_last is None or t > self.t_last:
            self.t_last = t

    def add_steps(self, batch: StepBatch) -> None:
        self.note_time(batch.t_first)
        self.note_time(batch.t_last)
        task = batch.task
        if task not in self._trained_to:  # its loss by steps: a printed one is not taken
            self.scalars.given_elsewhere(task, "loss")
        self._trained_to[task] = batch.last_step
        steps = batch.steps
        for rid, ys in zip(batch.replica_ids, batch.by_replica, strict=False):
            series = self.replica_loss.get(rid)
            if series is None:
                series = self.replica_loss[rid] = Series(dtype=np.float32)
                series.reserve(self.total_steps)
            if batch.all_finite:
                series.extend(steps, ys)
            else:
                finite = np.isfinite(ys)
                series.extend(steps[finite], ys[finite])
        if task != self._loss_task and (
                not self._loss_task or task_key(task) < task_key(self._loss_task)):
            self._loss_task, self._mean_loss = task, Series(dtype=np.float32)
            self._mean_loss.reserve(self.total_steps)
        if task == self._loss_task:
            finite = batch.means_finite
            if finite is None:
                self._mean_loss.extend(steps, batch.means)
            else:
                self._mean_loss.extend(steps[finite], batch.means[finite])
        ends = series_of(self._ends, task)
        for x, t in batch.ends:
            ends.append(x, t)
        for x, lr in batch.rates_lr:  # every task reports the same schedule: once a step
            seen = self.learning_rate.last_x
            if seen is None or seen < x:
                self.learning_rate.append(x, lr)
        if batch.rates:
            xs, ys = zip(*batch.rates, strict=True)
            series_of(self.throughput, task).extend(np.array(xs), np.array(ys))
        if batch.last_loss is not None:
            self._last_loss[task] = batch.last_loss

    def add_event(self, event: Event) -> bool:
        """Fold one event that is not a training step; True when it rewound the curves."""
        self.note_time(event.t)
        kind = event.kind
        if kind == "started":
            steps = event.get("steps")
            if isinstance(steps, int) and steps:
                self.total_steps = steps
            versions = event.get("versions")
            if isinstance(versions, dict):
                self.versions.update({str(k): str(v) for k, v in versions.items()})
            sent = event.get("gradient_bytes")
            if isinstance(sent, int) and sent > 0:
                self.gradient_bytes = sent
            if not self._progress_task or task_key(event.task) <= task_key(self._progress_task):
                self._progress_task = event.task
                self.script_progress.start(event.t)
            if not event.get("script"):  # a script trains once it first tells of it
                self.device_use.started(event.task)
            return self._started(event)
        if kind == "validation":
            self._validation(event)
        elif kind == "scalar":
            self.add_scalar(event)
        elif kind == "progress":
            self.device_use.started(event.task)  # a script's first line of progress
            if event.task == self._progress_task:
                self.script_progress.add(event)
        elif kind == SPLIT_KIND:
            self.device_use.started(event.task)  # a script's report()
            split = StepSplit.from_event(event.task, event.data)
            if split is not None:
                recent = self._split_window.setdefault(split.task, deque(maxlen=WINDOW_SPLITS))
                recent.append(split)
                self.splits[split.task] = window_split(recent) or split
                self.split_deferred.pop(split.task, None)
            else:
                waits = deferred_until(event.data)
                if waits is not None:
                    self.split_deferred[str(event.get("of_task") or event.task)] = waits
        elif kind == "device":
            self._add_cpu(event.task, event.get("devices"))
            self.memory.add(event.task, event.get("devices"))
            self.device_use.add(event.task, event.get("devices"), event.get("net"))
        elif kind == "failed":
            self.device_use.finished(event.task)
        elif kind == "finished":
            self.device_use.finished(event.task)
            loss = _float_or_none(event.get("loss"))
            if loss is not None:
                self._finished_loss[event.task] = loss
                if event.get("loss_from") == "printed":  # the steps' loss says it better
                    self._printed_finish.add(event.task)
        return False

    def add_scalar(self, event: Event) -> tuple[int | None, int | None]:
        """A script's `scalar` event; returns what it says of the progress (ScalarStore.add)."""
        self.note_time(event.t)
        self.device_use.started(event.task)  # a script's numbers: it trains
        progress = self.scalars.add(event)
        tag, step = event.get("tag"), event.get("step")
        if progress != (None, None) and is_loss_tag(tag):  # the time of a script's loss
            at = series_of(self._loss_scalar_at, (tag, event.task))
            if at.last_x is not None and step <= at.last_x:  # restarted: as ScalarStore does
                at.keep_up_to(step, inclusive=False)
            at.append(step, event.t)
        return progress

    def _started(self, event: Event) -> bool:
        """A task (re)started. Resumed from a checkpoint before the step it had trained to,
        its curves continue from there (the steps after it are trained again)."""
        task, t = event.task, event.t
        resumed = event.get("resumed_from_step")
        start = resumed if isinstance(resumed, int) and resumed > 0 else 0
        ends = series_of(self._ends, task)
        ends.keep_up_to(start, inclusive=False)
        ends.append(start, t)  # the first call's steps ran between the start and its end
        self._finished_loss.pop(task, None)
        self._printed_finish.discard(task)
        trained = self._trained_to.get(task, 0)
        if not isinstance(resumed, int) or resumed >= trained:
            return False
        for rid in event.get("replica_ids") or []:
            if int(rid) in self.replica_loss:
                self.replica_loss[int(rid)].keep_up_to(resumed)
        if task in self.throughput:
            self.throughput[task].keep_up_to(resumed)
        for series in (*self.validation.values(), self._validated_at, self.learning_rate):
            series.keep_up_to(resumed)
        self._trained_to[task] = resumed
        if task == self._loss_task:
            self._mean_loss.keep_up_to(resumed)
            if self._mean_loss.last is not None:
                self._last_loss[task] = self._mean_loss.last
            else:
                self._last_loss.pop(task, None)
        else:
            self._last_loss.pop(task, None)
        return True

    def _validation(self, event: Event) -> None:
        """Every MultiWorkerMirrored worker reports the same validation: kept once a step."""
        step = event.get("step")
        if not isinstance(step, int):
            return
        values = {"loss": event.get("loss"), **(event.get("metrics") or {})}
        kept = False
        for name, value in values.items():
            number = _float_or_none(value)
            if number is None:
                continue
            series = series_of(self.validation, str(name))
            if series.last_x is not None and series.last_x >= step:
                continue
            series.append(step, number)
            kept = True
        seen = self._validated_at.last_x
        if kept and (seen is None or seen < step):
            self._validated_at.append(step, event.t)

    # -- reading ----------------------------------------------------------------------------
    @property
    def main_task(self) -> str:
        """The task whose mean and final loss stand for the run ("" before any loss)."""
        if self._loss_task:
            return self._loss_task
        reporting = set(self._finished_loss) | set(self.scalars.loss_series())
        return min(reporting, key=task_key) if reporting else ""

    def final_loss(self) -> float | None:
        """The run's final loss, the one definition every view shows: the training loss its
        main task reported last (its `finished` event's, else its last training call's; for
        a script, which reports no steps, its loss scalar's last value, printed or not; a
        printed loss never replaces the steps' loss of a script calling report())."""
        task = self.main_task
        if not task:
            return None
        if task in self._finished_loss and not (
                task in self._printed_finish and task in self._last_loss):
            return self._finished_loss[task]
        if task in self._last_loss:
            return self._last_loss[task]
        _, values = self.scalars.loss_series().get(task, (_empty(), _empty()))
        return float(values[-1]) if len(values) else None

    def _add_cpu(self, task: str, devices: object) -> None:
        """A telemetry sample's CPU entry: the machine's busy % and the task's own % (a
        sample without the task's own share, from an older worker, is not a load)."""
        for dev in devices if isinstance(devices, list) else []:
            if not isinstance(dev, dict) or dev.get("kind") != "cpu":
                continue
            busy, own = dev.get("util"), dev.get("task_util")
            if isinstance(busy, (int, float)) and isinstance(own, (int, float)):
                self._cpu.setdefault(task, deque(maxlen=WINDOW_SAMPLES)).append(
                    (float(busy), float(own)))
                self._cpu_host[task] = str(dev.get("host") or "")

    def cpu_loads(self) -> list[CpuLoad]:
        """Each task's machine's CPU load over its last samples (bottleneck.CpuLoad); the
        run's own use of a machine is that of all its tasks there (one named host)."""
        found = [cpu_load(task, list(samples)) for task, samples in self._cpu.items()]
        loads = [load for load in found if load is not None]
        run_own: dict[str, float] = {}
        for load in loads:
            host = self._cpu_host.get(load.task, "")
            if host:
                run_own[host] = run_own.get(host, 0.0) + load.own
        return [CpuLoad(load.task, load.busy,
                        min(1.0, run_own.get(self._cpu_host.get(load.task, ""), load.own)))
                for load in loads]

    def span(self) -> float:
        """Seconds from the first event to the latest one (0 before two events)."""
        if self.t_first is None or self.t_last is None:
            return 0.0
        return max(0.0, self.t_last - self.t_first)

    def steps_done(self) -> int:
        return int(self._mean_loss.last_x or 0)

    def loss_curve(self) -> Curve:
        """The mean training loss over every replica, with each step's wall time (a call's
        steps share one event time: in between, the time grows linearly)."""
        xs, ys = self._mean_loss.view()
        steps, values = xs.astype(np.float64), ys.astype(np.float64)
        if not len(steps):
            return self._script_loss_curve()
        seconds = self._training_seconds(steps)
        return Curve(steps, values, seconds if seconds is not None else np.zeros_like(steps))

    def _training_seconds(self, steps: np.ndarray) -> np.ndarray | None:
        """The wall time at which the main task trained each of `steps` (seconds since the
        run's first event; a call's steps share one event time: in between, the time grows
        linearly); None when it reported no steps. The one time base of a run's curves by
        wall time: a value measured at a step (validation) sits where that step was trained."""
        ends_x, ends_t = self._ends.get(self._loss_task, Series()).view()
        if not len(ends_x):
            return None
        order = np.argsort(ends_x, kind="stable")
        return np.asarray(np.interp(steps, ends_x[order], ends_t[order]) - (self.t_first or 0.0),
                          dtype=np.float64)

    def _script_loss_curve(self) -> Curve:
        """A script reports no steps: its main task's loss scalar, as the dashboard plots it."""
        task = self.main_task
        tag = self.scalars.loss_tags().get(task)
        if tag is None:
            return Curve()
        steps, values = self.scalars.snapshot()[tag][task]
        _, times = self._loss_scalar_at.get((tag, task), Series()).view()
        seconds = times - (self.t_first or 0.0) if len(times) == len(steps) \
            else np.zeros_like(steps)
        return Curve(steps.copy(), values.copy(), seconds)

    def validation_curves(self) -> dict[str, Curve]:
        """The validation loss ("loss") and each metric, with the wall time of each point:
        when its step was trained (`_training_seconds`), as the training curve has it."""
        at_x, at_t = self._validated_at.view()
        out = {}
        for name, series in self.validation.items():
            xs, ys = series.view()
            seconds = self._training_seconds(xs.astype(np.float64))
            if seconds is None:  # no steps reported (a script): when it was validated
                where = np.clip(np.searchsorted(at_x, xs), 0, max(0, len(at_x) - 1))
                seconds = (at_t[where] - (self.t_first or 0.0)) if len(at_x) \
                    else np.zeros_like(xs)
            out[name] = Curve(xs.astype(np.float64), ys.astype(np.float64),
                              np.asarray(seconds, dtype=np.float64))
        return out

    def throughput_views(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        return {k: s.view() for k, s in self.throughput.items()}


def curves_of(events_by_task: dict[str, list[Event]], total_steps: int = 0) -> RunCurves:
    """The curves of a whole run read back: each task's events in task order."""
    curves = RunCurves(total_steps)
    for task in sorted(events_by_task, key=task_key):
        curves.add_events(events_by_task[task])
    return curves


def bundle_curves(bundle_dir: Path | str, total_steps: int = 0) -> RunCurves:
    """A bundle's curves: every task's events file (output/events-*.jsonl) folded in task
    order. Blocks on the disk."""
    per_task: dict[str, list[Event]] = {}
    for path in sorted((Path(bundle_dir) / OUTPUT_DIR).glob(EVENTS_GLOB)):
        for event in read_all(path):
            per_task.setdefault(event.task, []).append(event)
    return curves_of(per_task, total_steps)


def final_loss_of_bundle(bundle_dir: Path | str) -> float | None:
    """The final loss of a run read back from its bundle (RunCurves.final_loss)."""
    return bundle_curves(bundle_dir).final_loss()
