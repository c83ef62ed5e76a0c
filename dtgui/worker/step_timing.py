"""Where a training task's step time goes, measured on the run itself (no TensorFlow here).

Every call's wall time and the time spent reporting it are counted as training runs. A short
calibration, after the fourth call and then every CALIBRATE_EVERY_CALLS calls or more (so
that the calibration runs' steps stay under 1 % of the steps between two calibrations,
whatever a step costs: `next_calibration`), times three calibration runs
(`dtgui.worker.calibration_runs.CalibrationRuns`): the training call fed from one cached
batch (forward, backward, gradient all-reduce, update; the variables are put back afterwards), the
gradient all-reduce alone (none with a single replica), and the plan's input pipeline alone
making a step's batches. Then, per step:

* input wait = the step's time in training minus the same step on data already there, but
  never more than the input pipeline alone takes to make the step's batches (so a step
  slowed by something else, another process on the machine say, is not called input);
* communication = the all-reduce alone (never more than what is left);
* compute = the rest of the call (forward, backward, the update, the loop);
* reporting = dtgui's per-call host work: events, loss summaries, epochs (timed as it runs).

A `split` event (dtgui.core.bottleneck) goes out every SPLIT_EVERY_CALLS calls once a
calibration was made, and at the end. The calls are counted, never timed, to decide when to
calibrate: MultiWorkerMirrored workers must run the calibration runs' collectives together.

ParameterServer workers run the calls the coordinator schedules, so the coordinator keeps
their splits (`WorkerStepTimings`): each call times itself and its input wait on its worker,
and the calibration run is a round trip to the parameter servers (`dtgui.worker.calibration_runs
.RoundTripRuns`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

SPLIT_VARIABLE = "DTGUI_STEP_SPLIT"  # "0": no calibration, no split (to measure its cost)
FIRST_CALIBRATION_CALL = 4  # the first call traces; the next ones still settle the call size
CALIBRATE_EVERY_CALLS = 500  # at least; ~100 s at the usual 0.2 s call
CALIBRATION_REPEATS = 3  # each calibration run is repeated this many times; the median counts
CALIBRATION_SHARE = 0.01  # the calibration runs' steps: at most this share of those between two
SPLIT_EVERY_CALLS = 25  # ~5 s at the usual 0.2 s call
PARTS = ("input", "compute", "communication", "reporting")


def enabled() -> bool:
    return os.environ.get(SPLIT_VARIABLE, "1") != "0"


def calibration_run_steps(k: int) -> int:
    """n, for runs of n then 2n steps (their difference is the measure: CalibrationRuns): a
    sixteenth of the current call (at least 4); each run is repeated three times (the median
    counts), so a calibration takes about as long as a call."""
    return max(4, k // 16)


def calibration_steps(n: int) -> int:
    """Steps a calibration with runs of n steps: n then 2n steps, CALIBRATION_REPEATS times, for
    the training step and for the all-reduce (counted as a step too: an upper bound)."""
    return 2 * CALIBRATION_REPEATS * 3 * n


def next_calibration(call: int, k: int) -> int:
    """The call after which the next calibration comes, one made after `call` with calls of
    `k` steps: CALIBRATE_EVERY_CALLS calls later, or later still when steps are so slow that
    calls hold one or a few (a calibration's runs are then many calls' worth). Calls and
    their size only, never time: MultiWorkerMirrored workers agree on both, so they
    calibrate at the same call, as their collectives must."""
    calibrating = calibration_steps(calibration_run_steps(k))
    return call + max(CALIBRATE_EVERY_CALLS,
                      math.ceil(calibrating / (CALIBRATION_SHARE * max(1, k))))


@dataclass
class Calibration:
    """Seconds per step of the two calibration runs (the latest calibration)."""

    step: float  # the training step fed from one cached batch
    reduce: float  # the gradient all-reduce alone
    input: float = float("inf")  # the input pipeline alone, making one step's batches
    setup: float = 0.0  # seconds of this calibration spent making the calibration runs (traces)


def split_parts(call: float, reporting: float, calibration: Calibration,
                input_wait: float | None = None) -> dict[str, float]:
    """Seconds per step by part, from a window's call time per step and reporting per step
    (`input_wait`: measured in the step itself, as ParameterServer workers do, instead of
    inferred from the calibration runs)."""
    if input_wait is None:
        cached = min(calibration.step, call)
        waiting = min(max(0.0, call - cached), calibration.input)
    else:
        waiting = min(max(0.0, input_wait), call)
    communication = min(calibration.reduce, call - waiting)
    return {"input": waiting, "compute": max(0.0, call - waiting - communication),
            "communication": communication, "reporting": reporting}


class StepTiming:
    """Counts a task's calls and decides when to calibrate and to report the split."""

    def __init__(self, active: bool = True, first_call_traces: bool = True) -> None:
        self.active = active and enabled()
        self.first_call_traces = first_call_traces  # not counted: it traced the function
        self.calls = 0
        self.calibration: Calibration | None = None
        self.calibration_seconds = 0.0  # what the calibration runs cost, their making excepted
        self.calibrations = 0
        self.setup_seconds = 0.0  # making the calibration runs (tracing them) once
        self.training_seconds = 0.0  # calls and reporting, the first call excepted
        self._window = [0.0, 0.0, 0]  # call seconds, reporting seconds, steps
        self._input_wait = 0.0  # seconds of the window's calls spent waiting for input
        self._input_timed = False  # the calls timed their input wait themselves
        self.method = "calibrated"
        self.measured: tuple[str, ...] = PARTS
        self._since_split = 0
        self._last_step = 0
        self._next_calibration = FIRST_CALIBRATION_CALL

    def call(self, steps: int, seconds: float, input_wait: float | None = None) -> None:
        """A training call of `steps` steps took `seconds` (to its results on the host;
        `input_wait`: of those, waiting for input, when the call timed it itself)."""
        self.calls += 1
        if self.calls == 1 and self.first_call_traces:
            return  # it traced the training function: not a measure of a step
        self._window[0] += seconds
        self._window[2] += steps
        if input_wait is not None:
            self._input_wait += input_wait
            self._input_timed = True
        self.training_seconds += seconds
        self._since_split += 1

    def reported(self, seconds: float, last_step: int) -> None:
        """Reporting that call took `seconds`."""
        self._last_step = last_step
        if self.calls > 1 or not self.first_call_traces:
            self._window[1] += seconds
            self.training_seconds += seconds

    def calibrate_now(self, k: int) -> bool:
        """Whether to calibrate after this call, of `k` steps (then the next one is set)."""
        if not self.active or self.calls < self._next_calibration:
            return False
        self._next_calibration = next_calibration(self.calls, k)
        return True

    def calibrated(self, calibration: Calibration, seconds: float) -> None:
        self.calibration = calibration
        self.calibrations += 1
        self.calibration_seconds += seconds - calibration.setup
        self.setup_seconds += calibration.setup

    def split_due(self, final: bool = False) -> bool:
        return (self.active and self.calibration is not None and self._window[2] > 0
                and (final or self._since_split >= SPLIT_EVERY_CALLS))

    def split_fields(self) -> dict[str, Any]:
        """The `split` event's fields for the calls since the last one (then a new window)."""
        assert self.calibration is not None
        calls, reporting, steps = self._window
        waited = self._input_wait / steps if self._input_timed else None
        parts = split_parts(calls / steps, reporting / steps, self.calibration, waited)
        self._window = [0.0, 0.0, 0]
        self._input_wait, self._input_timed = 0.0, False
        self._since_split = 0
        return {"step": self._last_step, "steps": steps, "calls": self.calls,
                "calibrations": self.calibrations, "method": self.method,
                "measured": list(self.measured), **{k: round(v, 7) for k, v in parts.items()},
                "probe_step": round(self.calibration.step, 7),
                "probe_reduce": round(self.calibration.reduce, 7),
                "probe_input": round(self.calibration.input, 7),
                "calibration_seconds": round(self.calibration_seconds, 4),
                "setup_seconds": round(self.setup_seconds, 4),
                "training_seconds": round(self.training_seconds, 4)}


class WorkerStepTimings:
    """Where the ParameterServer workers' step time goes, kept by the coordinator: workers
    train the calls it schedules, each call timing itself on its worker (the call's seconds
    and its input wait, with `tf.timestamp`, and which worker ran it), and the calibration's
    run is a parameter-server round trip timed on each worker (its variables read from the
    servers and gradient-sized tensors sent back: what a step moves). Per worker step:

    * input wait = the call's own measure of its `next(iterator)`s;
    * communication = the round trip (never more than what is left);
    * compute = the rest (forward, backward, the update on the servers).

    dtgui's reporting runs on the coordinator beside the workers' steps, not in them: the
    workers' splits do not measure it. When the calibrations come is decided by the calls
    the coordinator schedules (`next_calibration`), as for the other strategies."""

    MEASURED = ("input", "compute", "communication")
    RETRIES = 4  # calibration runs scheduled again for workers that had none

    def __init__(self, active: bool = True) -> None:
        self.schedule = StepTiming(active)  # every call, whichever worker: when to calibrate
        self.active = self.schedule.active
        self.workers: dict[int, StepTiming] = {}  # by the coordinator's worker index
        self.setup_seconds = 0.0
        self.calibrations = 0  # calibration runs collected
        self.retries = 0  # calibration runs scheduled again for a worker that had none

    def worker(self, index: int) -> StepTiming:
        if index not in self.workers:
            # a call is timed inside the graph on its worker: its tracing (on the
            # coordinator) is not in it, so even the first call counts
            timing = StepTiming(self.schedule.active, first_call_traces=False)
            timing.method = "worker-timed"
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
        if self.schedule.calibrate_now(k):
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
                timing.calibrated(Calibration(step=0.0, reduce=seconds, input=0.0),
                                  run_seconds.get(index, 0.0))
                timing.setup_seconds = self.setup_seconds

    def splits_due(self, final: bool = False) -> list[tuple[int, dict[str, Any]]]:
        """(worker, the `split` event's fields) for each worker with one due."""
        return [(i, t.split_fields()) for i, t in sorted(self.workers.items())
                if t.split_due(final)]
