"""The training loops (synchronous strategies, and the parameter_server coordinator) and the
``step`` / ``epoch`` / ``checkpoint`` events they emit."""

from __future__ import annotations

import collections
import math
import time
from typing import Any

import numpy as np

from .checkpoints import Checkpoints
from .events import EventWriter
from .loop import Trainer, xla_functions
from .strategy import StrategyInfo
from .summaries import Scalars

PRINT_EVERY_SECONDS = 2.0


class Progress:
    """Runs steps ``resumed+1 .. steps`` and reports them."""

    def __init__(self, plan: dict[str, Any], info: StrategyInfo, events: EventWriter,
                 ckpts: Checkpoints | None, writer: Scalars | None, global_batch: int, resumed: int,
                 task: str) -> None:
        self.info = info
        self.events = events
        self.ckpts = ckpts
        self.writer = writer
        self.global_batch = global_batch
        self.local_batch = global_batch * info.local_replicas // max(
            1, int(info.strategy.num_replicas_in_sync))
        self.start = resumed
        self.total = int(plan.get("steps", 0))
        self.per_epoch = max(1, int(plan.get("steps_per_epoch", 0) or self.total or 1))
        self.log_every = max(1, int(plan.get("log_every", 1) or 1))
        self.ckpt_every = int(plan.get("checkpoint_every", 0) or 0)
        self.task = task
        self.xla = bool(plan.get("xla"))
        self.started_at = time.time()
        self.last_loss: float | None = None
        self._last_report = (time.time(), resumed)
        self._last_print = 0.0
        self._epoch_losses: list[float] = []
        self._epoch_correct = 0.0
        self._warned_nan = False

    # -- synchronous strategies ------------------------------------------------------------
    def run(self, trainer: Trainer, dataset: Any) -> None:
        strategy = self.info.strategy
        iterator = iter(dataset)
        for step in range(self.start + 1, self.total + 1):
            losses, mean, correct = trainer.step(iterator)
            replica = [float(x) for x in strategy.experimental_local_results(losses)]
            if step == self.start + 1 and self.xla:
                self.report_xla(trainer, iterator)
            self.after_step(step, replica, float(mean), float(correct))
            if self.ckpts is not None and self.ckpt_every > 0 and step % self.ckpt_every == 0:
                self.save(step)
        self.finish()

    # -- parameter_server: the chief schedules steps on the workers --------------------------
    def run_ps(self, trainer: Trainer, per_worker_dataset: Any) -> None:
        coordinator = self.info.coordinator
        iterator = iter(per_worker_dataset)
        in_flight: collections.deque[tuple[int, Any]] = collections.deque()
        max_in_flight = 4
        for step in range(self.start + 1, self.total + 1):
            in_flight.append((step, coordinator.schedule(trainer.step, args=(iterator,))))
            if step == self.start + 1 and self.xla:
                self.report_xla(trainer, iterator)
            boundary = self.ckpts is not None and self.ckpt_every > 0 \
                and step % self.ckpt_every == 0
            while in_flight and (len(in_flight) > max_in_flight or boundary):
                self._fetch_ps(*in_flight.popleft())
            if boundary:
                coordinator.join()
                self.save(step)
        while in_flight:
            self._fetch_ps(*in_flight.popleft())
        coordinator.join()
        self.finish()

    def _fetch_ps(self, step: int, remote: Any) -> None:
        loss, correct = remote.fetch()
        loss_f = float(np.asarray(loss))
        self.after_step(step, [loss_f], loss_f, float(np.asarray(correct)))

    def report_xla(self, trainer: Trainer, iterator: Any) -> None:
        try:
            names = xla_functions(trainer, iterator)
        except Exception as exc:  # the check is evidence only; training goes on
            self.events.log(f"XLA: could not inspect the step function: {exc}", level="warning")
            return
        if names:
            self.events.log(f"XLA: the replica step is compiled by XLA ({names[0]})")
        else:
            self.events.log("XLA: no XLA-compiled function found in the step", level="warning")

    # -- reporting ---------------------------------------------------------------------------
    def after_step(self, step: int, replica_losses: list[float], mean: float,
                   correct: float) -> None:
        self.last_loss = mean
        if not math.isfinite(mean) and not self._warned_nan:
            self._warned_nan = True
            self.events.log(f"the loss is {mean} at step {step}: lower the learning rate or "
                            f"check the data", level="warning")
        self._epoch_losses.append(mean)
        self._epoch_correct += correct
        epoch = (step - 1) // self.per_epoch + 1
        if self.writer is not None:
            self.writer.scalar("loss", mean, step)
        if step % self.log_every == 0 or step == self.total:
            now = time.time()
            then, then_step = self._last_report
            rate = (step - then_step) * self.local_batch / max(now - then, 1e-9)
            self._last_report = (now, step)
            self.events.emit("step", step=step, epoch=epoch, replica_losses=replica_losses,
                             replica_ids=self.info.replica_ids, loss=mean,
                             examples_per_sec=round(rate, 2))
            if now - self._last_print >= PRINT_EVERY_SECONDS or step == self.total \
                    or step == self.start + 1:
                self._last_print = now
                print(f"[{self.task}] step {step}/{self.total} epoch {epoch} loss {mean:.4f} "
                      f"({rate:.0f} examples/s)", flush=True)
        if step % self.per_epoch == 0:
            self._end_epoch(step, epoch)

    def _end_epoch(self, step: int, epoch: int) -> None:
        n = len(self._epoch_losses)
        if n == 0:
            return
        loss = float(np.mean(self._epoch_losses))
        accuracy = self._epoch_correct / (n * self.global_batch)
        self.events.emit("epoch", epoch=epoch, loss=loss, accuracy=accuracy, steps=step)
        if self.writer is not None:
            self.writer.scalar("epoch_loss", loss, step)
            self.writer.scalar("epoch_accuracy", accuracy, step)
        self._epoch_losses = []
        self._epoch_correct = 0.0

    def save(self, step: int) -> None:
        assert self.ckpts is not None
        path = self.ckpts.save(step)
        if self.info.is_chief:
            self.events.emit("checkpoint", step=step, path=path)
        self._last_report = (time.time(), self._last_report[1])  # rate excludes saving

    def finish(self) -> None:
        last = self.total
        if self.ckpts is not None and last > self.start \
                and not (self.ckpt_every > 0 and last % self.ckpt_every == 0):
            self.save(last)
