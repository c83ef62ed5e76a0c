"""The parameter_server coordinator's training loop: several calls a worker in flight (the
workers train asynchronously), fetched together, each worker's step timed by its calls and
the calibration's round-trip runs. Functions of the `Progress` they report through."""

from __future__ import annotations

import collections
import time
from typing import Any, Protocol

import numpy as np
import tensorflow as tf

from .calibration_runs import RoundTripRuns
from .call_size import StepsPerCall
from .distribute import BuiltStrategy
from .events import EventWriter
from .loop import Trainer, report_xla
from .step_timing import WorkerStepTimings, calibration_run_steps
from .stop_request import StopRequest


class Reports(Protocol):
    """What the coordinator's loop reads and reports through (progress.py's `Progress`)."""

    info: BuiltStrategy
    events: EventWriter
    sizer: StepsPerCall
    stop: StopRequest
    worker_timing: WorkerStepTimings
    round_trip_runs: RoundTripRuns | None
    start: int
    total: int
    ckpt_every: int
    val_every: int
    ps_workers: int
    xla: bool

    def after_steps(self, first: int, replica_losses: np.ndarray, means: np.ndarray,
                    correct: np.ndarray, lr: float | None = None) -> None: ...

    def emit_worker_splits(self, final: bool = False) -> None: ...

    def no_split(self, exc: Exception) -> None: ...

    def validate(self, step: int) -> None: ...

    def save(self, step: int) -> None: ...

    def stopped(self, step: int) -> None: ...

    def finish(self) -> None: ...


def train_ps(progress: Reports, trainer: Trainer, per_worker_dataset: Any) -> None:
    """Keeps several calls per worker in flight (the workers train asynchronously) and
    fetches the finished ones together."""
    coordinator = progress.info.coordinator
    iterator = iter(per_worker_dataset)
    in_flight: collections.deque[tuple[int, int, Any]] = collections.deque()
    max_in_flight = 4 * progress.ps_workers
    done = progress.start
    fetched_at = time.perf_counter()
    while done < progress.total and not progress.stop.requested:
        k = progress.sizer.next(done, progress.total, progress.ckpt_every, progress.val_every)
        remote = coordinator.schedule(trainer.run, args=(iterator, tf.constant(k, tf.int32)))
        in_flight.append((done + 1, k, remote))
        progress.worker_timing.scheduled()
        if not (progress.round_trip_runs and progress.round_trip_runs.calls) \
                and progress.worker_timing.calibrate_now(k):
            schedule_round_trips(progress, k)
        if done == progress.start and progress.xla:
            report_xla(progress.events, trainer, iterator, tf.constant(1, tf.int32))
        done += k
        saving = progress.ckpt_every > 0 and done % progress.ckpt_every == 0
        validating = progress.val_every > 0 and done % progress.val_every == 0
        boundary = saving or validating
        if len(in_flight) >= max_in_flight or boundary:
            batch = len(in_flight) if boundary else len(in_flight) // 2
            fetched_at = fetch_ps_calls(progress, in_flight, batch, fetched_at)
        if boundary:
            coordinator.join()
        if validating:
            progress.validate(done)
        if saving:
            progress.save(done)
    fetch_ps_calls(progress, in_flight, len(in_flight), fetched_at)
    coordinator.join()
    if done < progress.total:
        progress.stopped(done)
        return
    progress.finish()

def fetch_ps_calls(progress: Reports, in_flight: collections.deque[tuple[int, int, Any]],
               count: int, since: float) -> float:
    if count <= 0:
        return since
    calls = [in_flight.popleft() for _ in range(count)]
    results = progress.info.coordinator.fetch([c[2] for c in calls])
    rows = np.concatenate([np.asarray(r[0]).reshape(-1, 2) for r in results])
    now = time.perf_counter()
    steps = sum(c[1] for c in calls)
    progress.sizer.observe((now - since) * progress.ps_workers / max(1, steps))
    progress.sizer.agree(progress.sizer.proposal)
    progress.after_steps(calls[0][0], rows[:, None, 0], rows[:, 0], rows[:, 1])
    last = calls[-1][0] + calls[-1][1] - 1
    for (_, k, _), result in zip(calls, results, strict=True):
        worker, seconds, waited = (float(x) for x in np.asarray(result[1]))
        progress.worker_timing.call(int(worker), k, seconds, waited, last)
    collect_round_trips(progress)
    progress.emit_worker_splits()
    return now

def schedule_round_trips(progress: Reports, k: int) -> None:
    """The calibration's round-trip runs, scheduled behind the calls in flight (two
    a worker: the coordinator hands each to the next free worker); collected at the next
    fetch of calls, which they follow in the queue."""
    if progress.round_trip_runs is None:
        return
    n = calibration_run_steps(k)
    try:
        progress.round_trip_runs.start(n, 2 * progress.ps_workers)
    except Exception as exc:  # noqa: BLE001 - a measure only; training goes on
        progress.no_split(exc)
        return
    progress.worker_timing.schedule_n = n

def collect_round_trips(progress: Reports) -> None:
    if progress.round_trip_runs is None or not progress.round_trip_runs.calls:
        return
    try:
        progress.worker_timing.calibrated(*progress.round_trip_runs.collect())
    except Exception as exc:  # noqa: BLE001 - a measure only; training goes on
        progress.no_split(exc)
