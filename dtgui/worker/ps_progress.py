"""The parameter_server coordinator's training loop: several calls a worker in flight (the
workers train asynchronously), fetched together, each worker's step timed by its calls and
the calibration's round-trip runs. Functions of the `Progress` they report through."""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import tensorflow as tf

from .calibration_runs import RoundTripRuns
from .call_size import StepsPerCall
from .distribute import BuiltStrategy
from .events import EventWriter
from .loop import Trainer, report_xla
from .profile_capture import ClusterCapture, ProfileCapture
from .profile_request import ProfileRequest
from .ps_step_timing import WorkerStepTimings
from .step_timing import calibration_run_steps
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
    profile: ProfileCapture | None  # run.py's ClusterCapture under parameter_server
    asked: ProfileRequest | None

    def after_steps(self, first: int, replica_losses: np.ndarray, means: np.ndarray,
                    correct: np.ndarray, lr: float | None = None) -> None: ...

    def emit_worker_splits(self, final: bool = False) -> None: ...

    def no_split(self, exc: Exception) -> None: ...

    def validate(self, step: int) -> None: ...

    def save(self, step: int) -> None: ...

    def stopped(self, step: int) -> None: ...

    def profile_asked(self, done: int, steps: int) -> ProfileCapture | None: ...

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
    pace = Pace()
    profile = cluster_capture(progress.profile)
    while done < progress.total and not progress.stop.requested:
        asked = progress.asked.take() if progress.asked is not None else 0
        if asked > 0:  # the coordinator alone schedules the steps: no agreement to wait for
            profile = cluster_capture(progress.profile_asked(done, asked))
        k = progress.sizer.next(done, progress.total, progress.ckpt_every, progress.val_every,
                                ends=profile.ends if profile is not None else ())
        if profile is not None and done + 1 == profile.first and not profile.open:
            # the workers finish the calls before the capture, so they trace the steps asked
            fetched_at = fetch_ps_calls(progress, in_flight, len(in_flight), fetched_at, pace)
            coordinator.join()
            profile.start(done + 1, pace.seconds_per_step)
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
        profiled = profile is not None and profile.open and done >= profile.last
        boundary = saving or validating or profiled
        if len(in_flight) >= max_in_flight or boundary:
            batch = len(in_flight) if boundary else len(in_flight) // 2
            fetched_at = fetch_ps_calls(progress, in_flight, batch, fetched_at, pace)
        if boundary:
            coordinator.join()
        if profile is not None:
            if profiled:
                profile.after(done)
            profile.settle()
        if validating:
            progress.validate(done)
        if saving:
            progress.save(done)
        if boundary:  # the pace of the steps leaves out what was done between them
            fetched_at = time.perf_counter()
    fetch_ps_calls(progress, in_flight, len(in_flight), fetched_at, pace)
    coordinator.join()
    if profile is not None:  # training ends (or stops) inside the profiled steps, or after
        profile.after(done, final=True)
    if done < progress.total:
        # a stop saves first: each worker writes its trace itself when its span ends
        progress.stopped(done)
        if profile is not None:
            profile.settle()
        return
    if profile is not None:
        profile.settle(wait=True)
    progress.finish()


def cluster_capture(capture: ProfileCapture | None) -> ClusterCapture | None:
    """The coordinator's capture (run.py makes a ClusterCapture under parameter_server)."""
    if capture is not None and not isinstance(capture, ClusterCapture):
        raise TypeError(f"a parameter_server coordinator captures with a ClusterCapture, not "
                        f"{type(capture).__name__}")
    return capture


@dataclass
class Pace:
    """The clock's seconds a step of the last calls fetched (every worker training; the
    first calls' set-up included until others are fetched; 0 before any)."""

    seconds_per_step: float = 0.0


def fetch_ps_calls(progress: Reports, in_flight: collections.deque[tuple[int, int, Any]],
                   count: int, since: float, pace: Pace) -> float:
    if count <= 0:
        return since
    calls = [in_flight.popleft() for _ in range(count)]
    results = progress.info.coordinator.fetch([c[2] for c in calls])
    rows = np.concatenate([np.asarray(r[0]).reshape(-1, 2) for r in results])
    now = time.perf_counter()
    steps = sum(c[1] for c in calls)
    pace.seconds_per_step = (now - since) / max(1, steps)
    progress.sizer.observe(pace.seconds_per_step * progress.ps_workers)
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
