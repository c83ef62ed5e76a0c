"""The one reducer of a run's events (pure Python + numpy, no Qt).

`RunCurves` folds the events of every task of a run into what is plotted and summarised:
each replica's training loss and the run's mean loss by step, each task's throughput, the
validation loss and metrics, the learning rate, a script's scalars, the wall time of every
point, and the final loss; and, through its parts, each task's state and the run's progress
(`RunTasks`), what its devices did (`RunDevices`) and the tasks' log lines (`TaskLogs`). A
task restarted from a checkpoint rewinds its curves to the resumed step (the steps after it
are trained again) instead of drawing them twice.

The live dashboard (`dtgui.core.live_run.LiveRun`, which holds one under its lock), Compare
(`dtgui.core.runs.compare`), the run history and the CLI all read runs through it, so they show the
same curves and the same final loss. Training steps come decoded in groups
(`dtgui.core.step_groups.step_batches`, the fast path).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import numpy as np

from dtgui.core.curve_values import best_index, best_validation
from dtgui.core.events import Event, as_number, read_all
from dtgui.core.measure.bottleneck import (
    SPLIT_KIND,
    WINDOW_SPLITS,
    CpuLoad,
    StepSplit,
    window_split,
)
from dtgui.core.measure.device_use import DeviceUse
from dtgui.core.measure.memory import MemoryPeaks
from dtgui.core.measure.split_wait import SplitWait, deferred_until
from dtgui.core.run_devices import RunDevices
from dtgui.core.run_tasks import RunTasks, task_key
from dtgui.core.scalars import ScalarStore, is_loss_tag
from dtgui.core.scripts.script_progress import ScriptProgress
from dtgui.core.series import Curve, Series, no_values, series_of
from dtgui.core.step_groups import StepBatch, step_batches
from dtgui.core.task_logs import TaskLogs
from dtgui.worker.layout import EVENTS_GLOB, OUTPUT_DIR


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
        self.tasks = RunTasks()  # each task's state, the run's step and epoch, its models
        self.devices = RunDevices()  # `device` events: series, peaks, use, CPU load
        self.logs = TaskLogs()  # `log` events (and, in LiveRun, the tasks' log files)
        self.gradient_bytes = 0  # what a step's all-reduce carries (`started` events)
        self.all_reduce_note = ""  # the gradients' compression, or why it fell back
        # task -> where its step time went over its last WINDOW_SPLITS splits (window_split)
        self.splits: dict[str, StepSplit] = {}
        self._split_window: dict[str, deque[StepSplit]] = {}
        # task -> from when it will be measured (not measured yet), in its stretch of training
        self.split_deferred: dict[str, SplitWait] = {}
        self._stretches: dict[str, int] = {}  # task -> its stretches of training (starts)
        self.versions: dict[str, str] = {}  # the training program's (TensorFlow, Keras...)
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.stopped_seconds = 0.0  # between a task's last event and its start again
        self._started_tasks: set[str] = set()
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

    @property
    def memory(self) -> MemoryPeaks:
        """Each task's peak memory (`device` events)."""
        return self.devices.memory

    @property
    def device_use(self) -> DeviceUse:
        """Each device's use while training and the machines' traffic (`device` events)."""
        return self.devices.use

    def cpu_loads(self) -> list[CpuLoad]:
        """Each task's machine's CPU load over its last samples (RunDevices.cpu_loads)."""
        return self.devices.cpu_loads()

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
        self.tasks.trained(task, batch.last_step, batch.epoch)
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

    def add_event(self, event: Event) -> None:
        """Fold one event that is not a training step (those come in a StepBatch)."""
        before = self.t_last
        self.note_time(event.t)
        kind, task = event.kind, event.task
        state = self.tasks.of(task)  # every event names its task
        if kind == "started":
            if task in self._started_tasks and before is not None:
                self.stopped_seconds += max(0.0, event.t - before)  # stopped, then resumed
            self._started_tasks.add(task)
            self._stretches[task] = self._stretches.get(task, 0) + 1
            self._started(event)
        elif kind == "validation":
            self._validation(event)
        elif kind == "scalar":
            self.add_scalar(event)
        elif kind == "progress":
            self.devices.use.started(task)  # a script's first line of progress
            if task == self._progress_task:
                self.script_progress.add(event)
            done = event.get("done")
            if event.get("unit") == "epoch" and isinstance(done, int):  # a script's epochs
                self.tasks.reached_epoch(done)
        elif kind == SPLIT_KIND:
            self.devices.use.started(task)  # a script's report()
            self._split(event)
        elif kind == "device":
            t0 = self.t_first if self.t_first is not None else event.t
            self.devices.add(event, event.t - t0, state.machine, self.tasks.ended)
        elif kind == "epoch":
            self.tasks.epoch_ended({**event.data, **(event.get("metrics") or {})})
        elif kind == "model_saved":
            self.tasks.models.append(
                {k: v for k, v in event.data.items() if k not in ("v", "kind")})
        elif kind == "failed":
            self.devices.use.finished(task)
            self.tasks.failed(task, str(event.get("error", "failed")))
        elif kind == "finished":
            self.devices.use.finished(task)
            self.tasks.finished(task)
            loss = event.number("loss")
            if loss is not None:
                self._finished_loss[task] = loss
                if event.get("loss_from") == "printed":  # the steps' loss says it better
                    self._printed_finish.add(task)
        elif kind == "log":
            self.logs.add(task, [f"[{event.get('level', 'info')}] {event.get('message', '')}"])

    def _split(self, event: Event) -> None:
        """Where a task's step time went (a window of its last splits), or from when it will
        be measured."""
        split = StepSplit.from_event(event.task, event.data)
        if split is not None:
            recent = self._split_window.setdefault(split.task, deque(maxlen=WINDOW_SPLITS))
            recent.append(split)
            self.splits[split.task] = window_split(recent) or split
            self.split_deferred.pop(split.task, None)
        else:
            waits = deferred_until(event.data)
            if waits is not None:
                measured = str(event.get("of_task") or event.task)
                trained = as_number(event.get("clock_seconds")) or 0.0
                stretch = self._stretches.get(event.task, 1)
                before = self.split_deferred.get(measured)
                self.split_deferred[measured] = (
                    SplitWait(waits, trained, stretch) if before is None
                    else before.then(waits, trained, stretch))

    def add_scalar(self, event: Event) -> tuple[int | None, int | None]:
        """A script's `scalar` event; returns what it says of the progress (ScalarStore.add)."""
        self.note_time(event.t)
        self.devices.use.started(event.task)  # a script's numbers: it trains
        progress = self.scalars.add(event)
        self.tasks.moved(event.task, *progress)
        tag, step = event.get("tag"), event.get("step")
        if progress != (None, None) and is_loss_tag(tag):  # the time of a script's loss
            at = series_of(self._loss_scalar_at, (tag, event.task))
            if at.last_x is not None and step <= at.last_x:  # restarted: as ScalarStore does
                at.keep_up_to(step, inclusive=False)
            at.append(step, event.t)
        return progress

    def _started(self, event: Event) -> None:
        """A task (re)started. Resumed from a checkpoint before the step it had trained to,
        its curves continue from there (the steps after it are trained again)."""
        task, t = event.task, event.t
        steps = event.get("steps")
        if isinstance(steps, int) and steps:
            self.total_steps = steps
        versions = event.get("versions")
        if isinstance(versions, dict):
            self.versions.update({str(k): str(v) for k, v in versions.items()})
        sent = event.get("gradient_bytes")
        if isinstance(sent, int) and sent > 0:
            self.gradient_bytes = sent
        self._note_compression(event.get("grad_compression"), event.get("compression_fallback"))
        if not self._progress_task or task_key(task) <= task_key(self._progress_task):
            self._progress_task = task
            self.script_progress.start(t)
        if not event.get("script"):  # a script trains once it first tells of it
            self.devices.use.started(task)
        self.devices.task_started(task)  # started again: nothing was measured meanwhile
        resumed = event.get("resumed_from_step")
        start = resumed if isinstance(resumed, int) and resumed > 0 else 0
        ends = series_of(self._ends, task)
        ends.keep_up_to(start, inclusive=False)
        ends.append(start, t)  # the first call's steps ran between the start and its end
        self._finished_loss.pop(task, None)
        self._printed_finish.discard(task)
        rewound = self._rewind(task, resumed, event.get("replica_ids") or [])
        self.tasks.started(task, int(event.get("replicas", 0) or 0),
                           resumed if rewound else None)

    def _note_compression(self, applied: object, fallback: object) -> None:
        """What the card says of the all-reduce: the dtype gradients cross the network in,
        or why the run fell back to float32 (every worker decides alike: the last said)."""
        if isinstance(fallback, str) and fallback:
            self.all_reduce_note = f"Uncompressed: {fallback}."
        elif applied in ("float16", "bfloat16"):
            self.all_reduce_note = (f"Gradients cross the network as {applied} (summed, applied "
                                    "in float32).")

    def _rewind(self, task: str, resumed: object, replica_ids: Iterable[int]) -> bool:
        """Resumed before the step the task had trained to: its curves are cut there; True
        when they were."""
        trained = self._trained_to.get(task, 0)
        if not isinstance(resumed, int) or resumed >= trained:
            return False
        for rid in replica_ids:
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
            number = as_number(value)
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
        _, values = self.scalars.loss_series().get(task, (no_values(), no_values()))
        return float(values[-1]) if len(values) else None

    def progress(self) -> ScriptProgress:
        """How far the run is, paced from its main task's start: what a script told, else
        the steps trained against the plan's."""
        told = self.script_progress
        if told.unit:
            return replace(told)
        return ScriptProgress(unit="step", done=self.tasks.step, total=self.total_steps,
                              started_at=told.started_at, done_at=self.t_last)

    def span(self) -> float:
        """Seconds from the first event to the latest one (0 before two events)."""
        if self.t_first is None or self.t_last is None:
            return 0.0
        return max(0.0, self.t_last - self.t_first)

    def training_span(self) -> float:
        """The span without the time the run was stopped before a resume (its elapsed
        time)."""
        return max(0.0, self.span() - self.stopped_seconds)

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

    def best_validation(self) -> tuple[str, float] | None:
        """The validation value the run is listed with so far (`best_validation`: its
        loss's best, else its preferred metric's), named; None before any."""
        bests = {}
        for name, series in self.validation.items():
            _, values = series.view()
            at = best_index(values, name)
            if at is not None:
                bests[name] = float(values[at])
        return best_validation(bests)

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
