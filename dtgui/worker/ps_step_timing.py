"""Where the ParameterServer workers' step time goes, kept by their coordinator (no TensorFlow
here): one `StepTiming` (dtgui.worker.step_timing) a worker, fed by the calls it ran."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .step_timing import WORKER_TIMED, Calibration, StepTiming


class WorkerStepTimings:
    """Where the ParameterServer workers' step time goes, kept by the coordinator: workers
    train the calls it schedules, each call timing itself on its worker (the call's seconds
    and its input wait, with `tf.timestamp`, and which worker ran it), and the calibration's
    run is a parameter-server round trip timed on each worker (its variables read from the
    servers and gradient-sized tensors sent back: what a step moves). Per worker step:

    * input wait = the call's own measure of its `next(iterator)`s;
    * communication = the round trip (never more than what is left);
    * compute = the rest (forward, backward, the update on the servers); when nothing is
      left (the round trip timed alone took as long as the step) compute is not told apart
      from communication, and the split's `measured` leaves it out.

    dtgui's reporting runs on the coordinator beside the workers' steps, not in them: the
    workers' splits do not measure it. When the calibrations come is decided by the calls
    the coordinator schedules (`next_calibration`), as for the other strategies."""

    MEASURED = ("input", "compute", "communication")
    RETRIES = 4  # calibration runs scheduled again for workers that had none

    def __init__(self, active: bool = True,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.schedule = StepTiming(active, first_call_traces=False, clock=clock)  # when
        self.active = self.schedule.active
        self.workers: dict[int, StepTiming] = {}  # by the coordinator's worker index
        self.setup_seconds = 0.0
        self.calibrations = 0  # calibration runs collected
        self.retries = 0  # calibration runs scheduled again for a worker that had none
        self.schedule_n = 0  # round trips in each calibration run scheduled last

    def worker(self, index: int) -> StepTiming:
        if index not in self.workers:
            # a call is timed inside the graph on its worker: its tracing (on the
            # coordinator) is not in it, so even the first call counts
            timing = StepTiming(self.schedule.active, first_call_traces=False,
                                clock=self.schedule._now)
            timing.started = self.schedule.started  # the clock of the run's training
            timing.method = WORKER_TIMED
            timing.measured = self.MEASURED
            self.workers[index] = timing
        return self.workers[index]

    def scheduled(self) -> None:
        """A call was scheduled (counted to decide when to calibrate)."""
        self.schedule.calls += 1

    def calibrate_now(self, k: int) -> bool:
        """Whether to schedule the calibration runs after this call: at the calibration's calls, and
        again (a few times) while a worker that trains has not run one (the coordinator
        gives a run to whichever worker is free, not to each in turn)."""
        if not self.active:
            return False
        # every worker that trains pays for it within the budget (the coordinator decides
        # alone: no agreement to make)
        wished = bool(self.workers) and all(t.allowance() >= t.estimate(k)
                                            for t in self.workers.values())
        if self.schedule.calibrate_now(k, wished):
            return True
        missing = any(t.calibration is None for t in self.workers.values())
        if missing and self.calibrations and self.retries < self.RETRIES:
            self.retries += 1
            return True
        return False

    def call(self, worker: int, steps: int, seconds: float, input_wait: float,
             last_step: int) -> None:
        """A call of `steps` steps ran on `worker` in `seconds` (timed there), `input_wait`
        of them waiting for input; the run has reached `last_step`. A call that did not time
        itself (worker -1) is not counted."""
        if worker < 0 or not self.active:
            return
        timing = self.worker(worker)
        timing.call(steps, seconds, input_wait)
        timing.reported(0.0, last_step)

    def calibrated(self, round_trips: dict[int, float], run_seconds: dict[int, float],
                   setup: float) -> None:
        """`round_trips`: per worker, seconds of one round trip; `run_seconds`: per worker,
        what its calibration runs took (their cost to that worker); `setup`: making the run once."""
        self.setup_seconds += setup
        self.calibrations += 1
        for index, seconds in round_trips.items():
            if index >= 0:
                timing = self.worker(index)
                # making the run (on the coordinator) is counted to every worker: honest,
                # an upper bound
                timing.calibrated(Calibration(step=0.0, reduce=seconds, input=0.0, setup=setup),
                                  run_seconds.get(index, 0.0) + setup,
                                  self.schedule_n)

    def splits_due(self, final: bool = False, k: int = 1) -> list[tuple[int, dict[str, Any]]]:
        """(worker, the `split` event's fields) for each worker with one due (or with one
        saying it waits for a longer run)."""
        due = []
        for i, timing in sorted(self.workers.items()):
            if timing.split_due(final):
                due.append((i, timing.split_fields()))
            elif timing.deferred_due(final):
                due.append((i, timing.deferred_fields(k)))
        return due
