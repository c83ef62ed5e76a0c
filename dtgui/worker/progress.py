"""The training loops (synchronous strategies, and the parameter_server coordinator) and the
``steps`` / ``epoch`` / ``checkpoint`` events they emit.

Each call trains many steps on the device (``Trainer.run``) and is fetched to the host once:
a device-to-host copy per step would stall the device (on a GPU it drains the queue of
launched kernels). What comes back, every step's per-replica losses, is written as one
``steps`` event per call, so the curves still have every step.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from . import step_batch
from .calibration_runs import CalibrationRuns, RoundTripRuns
from .call_size import StepsPerCall
from .checkpoints import Checkpoints
from .distribute import BuiltStrategy
from .events import EventWriter
from .export import ModelSaver
from .loop import Trainer, report_xla, stop_pair, wishes
from .optim import learning_rate_at
from .plan import Plan
from .profile_capture import ProfileCapture
from .profile_request import ProfileRequest
from .ps_progress import train_ps
from .ps_step_timing import WorkerStepTimings
from .step_timing import StepTiming, calibration_run_steps
from .stop_request import StopRequest, stop_reason, stopped_message
from .summaries import Scalars
from .validation import Validator

PRINT_EVERY_SECONDS = 2.0
TIMELINE_POINTS = 256  # (step, seconds) marks kept for the `finished` event
# Turns off the per-call `steps` events and loss summaries (only to measure what they cost).
LIVE_EVENTS_VARIABLE = "DTGUI_LIVE_EVENTS"


class Progress:
    """Runs steps ``resumed+1 .. steps`` and reports them."""

    def __init__(self, plan: Plan, info: BuiltStrategy, events: EventWriter,
                 ckpts: Checkpoints | None, writer: Scalars | None, global_batch: int, resumed: int,
                 task: str, *, optimizer: Any = None, validator: Validator | None = None,
                 saver: ModelSaver | None = None, classification: bool = True,
                 calibration_runs: CalibrationRuns | None = None,
                 round_trip_runs: RoundTripRuns | None = None,
                 stop: StopRequest | None = None,
                 profile: ProfileCapture | None = None,
                 asked: ProfileRequest | None = None,
                 capture: Callable[[int, int], ProfileCapture] | None = None) -> None:
        self.info = info
        self.events = events
        self.ckpts = ckpts
        self.writer = writer
        self.global_batch = global_batch
        self.replicas_in_sync = max(1, int(info.strategy.num_replicas_in_sync))
        self.local_batch = global_batch * info.local_replicas // self.replicas_in_sync
        self.start = resumed
        self.total = plan.steps
        self.per_epoch = max(1, plan.steps_per_epoch)
        self.log_every = max(1, plan.log_every)
        self.ckpt_every = plan.checkpoint_every if ckpts is not None else 0
        self.optimizer = optimizer
        self.validator = validator
        self.saver = saver
        self.classification = classification
        self.micro_batches = plan.micro_batches
        self.val_every = max(1, plan.validation_interval) if validator is not None else 0
        self._validated_at = 0
        self.sizer = StepsPerCall(plan.steps_per_call, max(1, info.local_replicas))
        self.ps_workers = max(1, info.ps_workers or len(plan.worker_tasks))
        self.live = os.environ.get(LIVE_EVENTS_VARIABLE, "1") != "0"
        self.task = task
        self.xla = plan.xla
        self.started_at = time.time()
        self.last_loss: float | None = None
        self._last_report = (time.perf_counter(), resumed)
        self._last_print = 0.0
        self._epoch_loss = 0.0
        self._epoch_steps = 0
        self._epoch_correct = 0.0
        self._warned_nan = False
        self._clock0 = time.perf_counter()
        self.reporting_seconds = 0.0  # spent writing the live events and loss summaries
        self.timeline: list[tuple[int, float]] = []  # (step, seconds since the start) per call
        self.calibration_runs = calibration_runs
        self.timing = StepTiming(active=calibration_runs is not None)  # where a step's time goes
        # parameter_server: the workers' steps, timed by the calls and a round-trip run
        self.round_trip_runs = round_trip_runs
        self.worker_timing = WorkerStepTimings(active=round_trip_runs is not None)
        self.stop = stop or StopRequest()
        self.profile = profile  # TensorFlow's profiler over the plan's profile steps
        # a profile asked while training (profile_request.py), and how a capture is made
        self.asked = asked
        self.capture = capture
        self.stopped_at: int | None = None  # the step the run stopped at (a stop was asked)

    # -- synchronous strategies ------------------------------------------------------------
    def run(self, trainer: Trainer, dataset: Any) -> None:
        iterator = iter(dataset)
        no_reduces = tf.constant(0, tf.int32)  # a training call probes no all-reduce
        done = self.start
        profile = self.profile
        while done < self.total:
            k = self.sizer.next(done, self.total, self.ckpt_every, self.val_every,
                                ends=profile.ends if profile is not None else ())
            asked = self.asked.take() if self.asked is not None else 0
            asked = asked if self.info.is_chief else 0  # one contribution: see ProfileRequest
            if profile is not None:
                profile.before(done + 1)
            began = time.perf_counter()
            with profile.marked(done + 1, done + k) if profile is not None \
                    else contextlib.nullcontext():
                per_task, totals, agreed, lr, stops, _ = trainer.run(
                    iterator, tf.constant(k, tf.int32),
                    wishes(self.sizer.proposal, self.timing.wish(k)),
                    stop_pair(self.stop.flag(), asked / max(1, self.info.local_replicas)),
                    no_reduces)
                per_task, totals = per_task.numpy(), totals.numpy()
            seconds = time.perf_counter() - began
            self.timing.call(k, seconds)
            size, wished = (float(x) for x in agreed.numpy())
            self.sizer.agree(size)
            self.sizer.observe(seconds / k)
            if done == self.start and self.xla:
                report_xla(self.events, trainer, iterator, tf.constant(1, tf.int32),
                           wishes(1.0, False), stop_pair(0.0, 0.0), no_reduces)
            began = time.perf_counter()
            self.after_steps(done + 1, per_task[:, :, 0], totals[:, 0] / self.replicas_in_sync,
                             totals[:, 1], float(lr))
            done += k
            self.timing.reported(time.perf_counter() - began, done)
            stopping, profiling = (float(x) for x in stops.numpy())
            if profile is not None:
                profile.after(done, final=stopping > 0)
            if stopping > 0 and done < self.total:  # every worker saw it after this call
                self.stopped(done)
                return
            if round(profiling) > 0:
                profile = self.profile_asked(done, round(profiling))
            if self.timing.calibrate_now(k, wished > 1 - 1e-6):  # every task wished it
                self.calibrate(k)
            self.emit_split(k=k)
            if self.val_every > 0 and done % self.val_every == 0:
                self.validate(done)
            if self.ckpt_every > 0 and done % self.ckpt_every == 0:
                self.save(done)
        self.finish()

    def profile_asked(self, done: int, steps: int) -> ProfileCapture | None:
        """The chief asked for `steps` steps (every worker sees it after the same call): the
        capture starts with the next call, unless one is under way or training ends first."""
        current = self.profile
        if current is not None and (current.first <= done < current.last or current.busy):
            self.events.log(f"profile: {steps} steps asked while steps {current.first}-"
                            f"{current.last} are being captured: not captured again",
                            level="warning")
            return current
        if done >= self.total or self.capture is None:
            return current
        last = min(self.total, done + steps)
        self.events.log(f"profile: capturing steps {done + 1}-{last} (asked while training)")
        self.profile = self.capture(done + 1, last)
        return self.profile

    # -- parameter_server: the chief schedules calls on the workers ---------------------------
    def run_ps(self, trainer: Trainer, per_worker_dataset: Any) -> None:
        """The parameter_server coordinator's loop (ps_progress.py)."""
        train_ps(self, trainer, per_worker_dataset)

    def emit_worker_splits(self, final: bool = False) -> None:
        """Each worker's split, measured by the coordinator's calls (`of_task`: the worker
        it is of; the event is the coordinator's)."""
        for worker, fields in self.worker_timing.splits_due(final, self.sizer.k):
            self.events.emit("split", of_task=f"worker:{worker}", **fields)

    def no_split(self, exc: Exception) -> None:
        self.timing.active = self.worker_timing.active = False
        self.events.log(f"could not measure where the step time goes: {exc}", level="warning")

    def calibrate(self, k: int) -> None:
        """Time the calibration runs (dtgui.worker.step_timing): every MultiWorkerMirrored worker
        does so at the same call, as their collectives must match."""
        assert self.calibration_runs is not None
        began = time.perf_counter()
        try:  # as many steps as the budget allows now, up to the precision wanted
            found = self.calibration_runs.measure(calibration_run_steps(k),
                                                  self.timing.allowance(), self.timing.per_step)
        except Exception as exc:  # noqa: BLE001 - a measure only; training goes on
            self.no_split(exc)
            return
        if found.n == 0:
            self.timing.put_off(found, time.perf_counter() - began)
            return
        self.timing.calibrated(found, time.perf_counter() - began, found.n)

    def emit_split(self, final: bool = False, k: int = 1) -> None:
        if self.info.coordinator is not None:
            self.emit_worker_splits(final)
            return
        began = time.perf_counter()
        if self.timing.split_due(final):
            self.events.emit("split", **self.timing.split_fields())
        elif self.timing.deferred_due(final):
            self.events.emit("split", **self.timing.deferred_fields(k))
        else:
            return
        self.timing.training_seconds += time.perf_counter() - began

    # -- reporting ---------------------------------------------------------------------------
    def after_steps(self, first: int, replica_losses: np.ndarray, means: np.ndarray,
                    correct: np.ndarray, lr: float | None = None) -> None:
        """Report steps first .. first+k-1: replica_losses (k, local replicas), the mean over
        every replica in sync (k), the number of correct predictions over all (k) and the
        learning rate of the last step (None: read from the optimizer)."""
        k = len(means)
        steps = np.arange(first, first + k, dtype=np.int64)
        last = int(steps[-1])
        self.last_loss = float(means[-1])
        finite = np.isfinite(means)
        if not self._warned_nan and not finite.all():
            self._warned_nan = True
            bad = int(steps[int(np.argmin(finite))])
            self.events.log(f"the loss is {float(means[~finite][0])} at step {bad}: lower the "
                            f"learning rate or check the data", level="warning")
        now = time.perf_counter()
        then, then_step = self._last_report
        rate = (last - then_step) * self.local_batch / max(now - then, 1e-9)
        self._last_report = (now, last)
        self._mark(last, now - self._clock0)
        if self.live:
            began = time.perf_counter()
            self._emit_steps(steps, replica_losses, means, rate, lr)
            self.reporting_seconds += time.perf_counter() - began
        self._count_epochs(steps, means, correct)
        if now - self._last_print >= PRINT_EVERY_SECONDS or last == self.total \
                or first == self.start + 1:
            self._last_print = now
            print(f"[{self.task}] step {last}/{self.total} epoch {self.epoch_of(last)} loss "
                  f"{self.last_loss:.4g} ({rate:.0f} examples/s)", flush=True)

    def _mark(self, step: int, seconds: float) -> None:
        """Keep when each call ended (at most TIMELINE_POINTS marks, thinned evenly, the
        first and the latest always kept): the steady training rate, and the steps by wall
        time, can be read from the `finished` event even with the live events off."""
        self.timeline.append((step, round(seconds, 4)))
        if len(self.timeline) > TIMELINE_POINTS:
            self.timeline = self.timeline[:-1:2] + self.timeline[-1:]

    def epoch_of(self, step: int) -> int:
        return (step - 1) // self.per_epoch + 1

    def _emit_steps(self, steps: np.ndarray, replica_losses: np.ndarray, means: np.ndarray,
                    rate: float, lr: float | None) -> None:
        rows: slice | np.ndarray = slice(None)
        if self.log_every > 1:
            rows = np.flatnonzero(steps % self.log_every == 0)
            if len(rows) == 0:
                return
        kept = steps[rows]
        if self.writer is not None:
            self.writer.series("loss", kept, means[rows])
        self.events.emit("steps", first=int(kept[0]), count=len(kept), stride=self.log_every,
                         epoch=self.epoch_of(int(steps[-1])),
                         replica_ids=self.info.replica_ids, encoding=step_batch.ENCODING,
                         losses=step_batch.encode(replica_losses[rows]),
                         means=step_batch.encode(means[rows]), loss=float(means[-1]),
                         examples_per_sec=round(rate, 2), **self._lr_field(int(steps[-1]), lr))

    def _lr_field(self, step: int, lr: float | None) -> dict[str, float]:
        if self.optimizer is None:
            return {}
        return {"lr": learning_rate_at(self.optimizer, step) if lr is None else lr}

    def _count_epochs(self, steps: np.ndarray, means: np.ndarray, correct: np.ndarray) -> None:
        """Epoch loss and accuracy over the steps of each epoch, an `epoch` event at its
        last step (a call may span several epochs)."""
        ends = np.flatnonzero(steps % self.per_epoch == 0)
        begin = 0
        for end in [*ends.tolist(), len(steps) - 1]:
            part = slice(begin, end + 1)
            self._epoch_loss += float(np.sum(means[part], dtype=np.float64))
            self._epoch_correct += float(np.sum(correct[part], dtype=np.float64))
            self._epoch_steps += len(means[part])
            begin = end + 1
            if steps[end] % self.per_epoch == 0:
                self._end_epoch(int(steps[end]))
            if begin >= len(steps):
                break

    def _end_epoch(self, step: int) -> None:
        n = self._epoch_steps
        if n == 0:
            return
        loss = self._epoch_loss / n
        epoch = self.epoch_of(step)
        metrics: dict[str, float] = {}
        if self.classification:  # an arg-max "accuracy" means nothing for other tasks
            metrics["accuracy"] = self._epoch_correct / (n * self.global_batch
                                                         * self.micro_batches)
        self.events.emit("epoch", epoch=epoch, loss=loss, steps=step, metrics=metrics,
                         **metrics)
        if self.writer is not None:
            self.writer.scalar("epoch_loss", loss, step)
            for name, value in metrics.items():
                self.writer.scalar(f"epoch_{name}", value, step)
        self._epoch_loss, self._epoch_correct, self._epoch_steps = 0.0, 0.0, 0

    def validate(self, step: int) -> None:
        """Every task evaluates (MultiWorkerMirrored: together); each reports the same."""
        if self.validator is None or step == self._validated_at:
            return
        self._validated_at = step
        began = time.perf_counter()
        values, examples = self.validator.run()
        loss = values.pop("loss")
        self.events.emit("validation", step=step, epoch=self.epoch_of(step), loss=loss,
                         metrics=values, examples=examples)
        if self.writer is not None:
            self.writer.scalar("val_loss", loss, step)
            for name, value in values.items():
                self.writer.scalar(f"val_{name}", value, step)
        if self.saver is not None:
            self.saver.consider(step, loss)
        self._last_report = (self._last_report[0] + time.perf_counter() - began,
                             self._last_report[1])  # the training rate excludes validating

    def save(self, step: int) -> None:
        assert self.ckpts is not None
        path = self.ckpts.save(step)
        if self.info.is_chief:
            self.events.emit("checkpoint", step=step, path=path)
        self._last_report = (time.perf_counter(), self._last_report[1])  # rate excludes saving

    def stopped(self, step: int) -> None:
        """A stop was asked: save at `step` (every MultiWorkerMirrored worker, together),
        whatever the checkpoint interval, and say so. The step split's last window (or
        why there is none, and how long this stretch trained) is said as at the end: a
        resumed run's measuring starts again, and its card tells the stretches apart."""
        self.emit_split(final=True, k=self.sizer.k)
        self.stopped_at = step
        saved = self.ckpts is not None and step > self.start
        if saved:
            self.save(step)
        message = stopped_message(step, saved, stop_reason(self.stop.signal))
        # once, as an event: every view of the log shows the task's `log` events beside
        # what it printed, so a printed copy would read twice
        self.events.emit("log", level="warning", message=message, stopped_at=step, saved=saved)

    def finish(self) -> None:
        last = self.total
        self.emit_split(final=True, k=self.sizer.k)
        if self.val_every > 0 and last > self.start:
            self.validate(last)  # the end, when it is not on an interval
        if self.ckpt_every > 0 and last > self.start and last % self.ckpt_every != 0:
            self.save(last)
