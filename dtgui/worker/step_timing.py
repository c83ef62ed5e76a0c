"""Where a training task's step time goes, measured on the run itself (no TensorFlow here).

Every call's wall time and the time spent reporting it are counted as training runs. A
calibration times three calibration runs (`dtgui.worker.calibration_runs.CalibrationRuns`): the
training call fed from one cached batch (forward, backward, gradient all-reduce, update; the
variables are put back afterwards), the gradient all-reduce alone (none with a single replica),
and the plan's input pipeline alone making a step's batches. Then, per step:

* input wait = the step's time in training minus the same step on data already there, but
  never more than the input pipeline alone takes to make the step's batches (so a step
  slowed by something else, another process on the machine say, is not called input);
* communication = the all-reduce alone (never more than what is left);
* compute = the rest of the call (forward, backward, the update, the loop);
* reporting = dtgui's per-call host work: events, loss summaries, epochs (timed as it runs).

What the calibrations take, making their runs included, stays within what the training so far
allows (`allowed`), on the clock a user sees since training began (the first call's tracing,
checkpoints and validation included: a ParameterServer worker's timed calls are a fraction of
it): FIRST_MINUTE_SHARE (5 %) of the first minute, SPLIT_BUDGET (1 %) past five minutes, never
less than it allowed before (so a run of ten minutes or more spends at most 1 %). The first
calibration's runs are sized to FIRST_CALIBRATION_SECONDS (`CalibrationRuns.measure`), so it
comes about twenty seconds into training. Its runs step on one cached batch, so an input-bound
step says nothing of their cost: the first call over that batch times one such step, and when
even the smallest runs (one step each, `smallest_calibration`) do not fit what the budget
allows, the calibration stops there (`put_off`, every task agreeing) and waits until the budget
pays for them (with a second a step: about half an hour); the next ones as the budget pays for them, at least
CALIBRATE_EVERY_CALLS calls after the last. A run too short for one is not measured: its
`split` events say so and from when it would be (`deferred_clock`, seconds on that clock).
MultiWorkerMirrored workers must run the calibration runs' collectives together: each call
carries the task's wish to calibrate to the others (`dtgui.worker.loop`, with the call size),
and a calibration comes when every task wished it.

A `split` event (dtgui.core.measure.bottleneck) goes out right after the first calibration, then
every SPLIT_EVERY_CALLS calls, and at the end.

ParameterServer workers run the calls the coordinator schedules, so the coordinator keeps
their splits (`WorkerStepTimings`): each call times itself and its input wait on its worker,
and the calibration run is a round trip to the parameter servers (`dtgui.worker.calibration_runs
.RoundTripRuns`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SPLIT_VARIABLE = "DTGUI_STEP_SPLIT"  # "0": no calibration, no split (to measure its cost)
BUDGET_VARIABLE = "DTGUI_SPLIT_BUDGET"  # another share than SPLIT_BUDGET ("1e6": any cost)
SPLIT_BUDGET = 0.01  # what the calibrations may take, at most, of a long run's training time
FIRST_MINUTE_SHARE = 0.05  # ... and of the first minute (the verdict comes in it)
FIRST_MINUTE = 60.0
# What the first calibration may take: its runs are sized to it (after making them, measured
# at 0.5-0.6 s with 2 replicas on this loaded machine), so it comes once FIRST_MINUTE_SHARE of
# the training pays for it, after about 20 s.
FIRST_CALIBRATION_SECONDS = 1.0
# A calibration run's n steps take at least this long when the budget allows (a call's own
# cost varies by a millisecond or more: fewer steps of a fast model would read its noise).
RUN_SECONDS = 0.01
FIRST_CALIBRATION_CALL = 4  # the first call traces; the next ones still settle the call size
CALIBRATE_EVERY_CALLS = 500  # at least; ~100 s at the usual 0.2 s call
CALIBRATION_REPEATS = 3  # each calibration run is repeated this many times; the median counts
CALIBRATION_SHARE = 0.01  # the calibration runs' steps: at most this share of those between two
# Before the first ParameterServer calibration, what it will take is guessed: each run's call
# as this many seconds beyond its steps (the synchronous strategies' runs are sized instead).
RUN_CALL_GUESS = 0.005
SPLIT_EVERY_CALLS = 25  # ~5 s at the usual 0.2 s call
PARTS = ("input", "compute", "communication", "reporting")
WORKER_TIMED = "worker-timed"  # a split's method: ParameterServer workers' calls timed there


def enabled() -> bool:
    return os.environ.get(SPLIT_VARIABLE, "1") != "0"


def split_budget() -> float:
    """The share of the training time the calibrations may take (SPLIT_BUDGET unless
    BUDGET_VARIABLE gives another: a large one measures even a short run, as tests do)."""
    try:
        share = float(os.environ.get(BUDGET_VARIABLE, ""))
    except ValueError:
        return SPLIT_BUDGET
    return share if share > 0 and math.isfinite(share) else SPLIT_BUDGET


def allowed(seconds: float, budget: float = SPLIT_BUDGET) -> float:
    """Seconds measuring may have taken `seconds` into training: FIRST_MINUTE_SHARE of the
    first minute, `budget` of the whole once that is more (from five minutes on), the two in
    proportion when `budget` is another share than SPLIT_BUDGET."""
    scale = budget / SPLIT_BUDGET
    t = max(0.0, seconds)
    return scale * max(FIRST_MINUTE_SHARE * min(t, FIRST_MINUTE), SPLIT_BUDGET * t)


def needed(seconds: float, budget: float = SPLIT_BUDGET) -> float:
    """The seconds into training from which `allowed` covers `seconds` of measuring."""
    scale = budget / SPLIT_BUDGET
    early = seconds / (scale * FIRST_MINUTE_SHARE)
    return early if early <= FIRST_MINUTE else seconds / (scale * SPLIT_BUDGET)


def calibration_run_steps(k: int) -> int:
    """n, for runs of n then 2n steps (their difference is the measure: CalibrationRuns): a
    sixteenth of the current call (at least 4); each run is repeated three times (the median
    counts), so a calibration takes about as long as a call."""
    return max(4, k // 16)


def calibration_steps(n: int) -> int:
    """Steps a calibration with runs of n steps: n then 2n steps, CALIBRATION_REPEATS times, for
    the training step and for the all-reduce (counted as a step too: an upper bound)."""
    return 2 * CALIBRATION_REPEATS * 3 * n


def smallest_calibration(step: float) -> float:
    """Seconds the smallest calibration's steps take with steps of `step` seconds on cached
    data: runs of one step (and the call that warms them up, a step too), whatever seconds it
    is given; the input pipeline's batches apart."""
    return (calibration_steps(1) + 1) * step


def next_calibration(call: int, k: int) -> int:
    """The earliest call after which the next calibration may come, one made after `call`
    with calls of `k` steps: CALIBRATE_EVERY_CALLS calls later, or later still when steps are
    so slow that calls hold one or a few (a calibration's runs are then many calls' worth)."""
    calibrating = calibration_steps(calibration_run_steps(k))
    return call + max(CALIBRATE_EVERY_CALLS,
                      math.ceil(calibrating / (CALIBRATION_SHARE * max(1, k))))


@dataclass
class Calibration:
    """Seconds per step of the two calibration runs (the latest calibration)."""

    step: float  # the training step fed from one cached batch
    reduce: float  # the gradient all-reduce alone
    input: float = float("inf")  # the input pipeline alone, making one step's batches
    setup: float = 0.0  # seconds of this calibration spent making the calibration runs
    n: int = 0  # the steps of its runs (n then 2n); 0: put off (`step`: one on cached data)


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

    def __init__(self, active: bool = True, first_call_traces: bool = True,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.active = active and enabled()
        self.first_call_traces = first_call_traces  # not counted: it traced the function
        # sized: the calibration's runs fit the seconds they are given (CalibrationRuns);
        # else (ParameterServer round trips) their cost is guessed from the steps
        self.sized = first_call_traces
        self._now = clock
        self.started = clock()  # training began
        self.budget = split_budget()
        self.calls = 0
        self.calibration: Calibration | None = None
        self.calibration_seconds = 0.0  # everything the calibrations took, making them included
        self.calibrations = 0
        self.setup_seconds = 0.0  # of which making the calibration runs (tracing them), once
        self.training_seconds = 0.0  # calls and reporting, the first call excepted
        self.steps = 0  # trained in the calls counted
        self._last_cost: tuple[int, float] | None = None  # (n, seconds) of the last calibration
        self._smallest: float | None = None  # the smallest runs' seconds, by a put-off one
        self._window = [0.0, 0.0, 0]  # call seconds, reporting seconds, steps
        self._input_wait = 0.0  # seconds of the window's calls spent waiting for input
        self._input_timed = False  # the calls timed their input wait themselves
        self.method = "calibrated"
        self.measured: tuple[str, ...] = PARTS
        self._since_split = 0
        self._last_step = 0
        self._next_calibration = FIRST_CALIBRATION_CALL
        self._deferred_sent = False

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
        self.steps += steps
        self._since_split += 1

    def reported(self, seconds: float, last_step: int) -> None:
        """Reporting that call took `seconds`."""
        self._last_step = last_step
        if self.calls > 1 or not self.first_call_traces:
            self._window[1] += seconds
            self.training_seconds += seconds

    @property
    def per_step(self) -> float:
        """Seconds of a training step so far (an upper bound of a step on cached data)."""
        return self.training_seconds / self.steps if self.steps else 0.0

    def estimate(self, k: int) -> float:
        """Seconds the next calibration would take with calls of `k` steps: the last one's,
        in proportion to its runs' steps; before any, what its sized runs are given
        (FIRST_CALIBRATION_SECONDS), or a guess from the step time (RUN_CALL_GUESS)."""
        n = calibration_run_steps(k)
        if self._last_cost is not None:
            last_n, seconds = self._last_cost
            return seconds * n / last_n
        if self.sized:
            # runs of one step are the least the runs can be sized to: once a first try timed
            # a step on cached data too slow for them (a second each across loaded machines),
            # the calibration waits until the budget pays for them
            return max(FIRST_CALIBRATION_SECONDS, self._smallest or 0.0)
        runs = 2 * CALIBRATION_REPEATS * 2 + 1  # calls of the two timed runs, and warming up
        return RUN_CALL_GUESS * runs + (calibration_steps(n) + n) * self.per_step

    def allowance(self) -> float:
        """Seconds the training so far allows measuring beyond what it took already."""
        return allowed(self.clock(), self.budget) - self.calibration_seconds

    def affordable_at(self, k: int) -> float:
        """The seconds into training that pay for the calibrations so far and the next one."""
        return needed(self.calibration_seconds + self.estimate(k), self.budget)

    def clock(self) -> float:
        """Seconds on the clock since training began (its first call's tracing included)."""
        return self._now() - self.started

    def wish(self, k: int) -> bool:
        """Whether this task would calibrate after the next call, of about `k` steps: the
        training so far pays for it within the budget, and CALIBRATE_EVERY_CALLS calls have
        passed since the last (MultiWorkerMirrored: every task must wish it, `calibrate_now`)."""
        return (self.active and self.calls + 1 >= self._next_calibration and self.steps > 0
                and self.allowance() >= self.estimate(k))

    def calibrate_now(self, k: int, wished: bool) -> bool:
        """Whether to calibrate after this call, of `k` steps, every task having `wished` it
        (then the earliest next one is set)."""
        if not self.active or not wished or self.calls < self._next_calibration:
            return False
        self._next_calibration = next_calibration(self.calls, k)
        return True

    def put_off(self, found: Calibration, seconds: float) -> None:
        """A calibration stopped after timing a step on cached data (`found.step`): its
        smallest runs did not fit; what it took (`seconds`, making its runs included) counts."""
        self.calibration_seconds += seconds
        self.setup_seconds += found.setup
        self._smallest = smallest_calibration(found.step) + found.input

    def calibrated(self, calibration: Calibration, seconds: float, n: int = 0) -> None:
        """A calibration with runs of `n` steps took `seconds`, its runs' making included."""
        self.calibration = calibration
        self.calibrations += 1
        self.calibration_seconds += seconds
        self.setup_seconds += calibration.setup
        if self.calibrations == 1:  # the first split goes out at once, over the calls so far
            self._since_split = max(self._since_split, SPLIT_EVERY_CALLS)
        if n > 0:
            self._last_cost = (n, max(0.0, seconds - calibration.setup))

    def split_due(self, final: bool = False) -> bool:
        return (self.active and self.calibration is not None and self._window[2] > 0
                and (final or self._since_split >= SPLIT_EVERY_CALLS))

    def deferred_due(self, final: bool = False) -> bool:
        """A `split` event saying the split waits for a longer run: once when the first
        calibration could have come, and at the end of a run that had none."""
        if not self.active or self.calibration is not None or self.steps == 0:
            return False
        if final:
            return True
        return not self._deferred_sent and self.calls >= FIRST_CALIBRATION_CALL

    def deferred_fields(self, k: int) -> dict[str, Any]:
        """The `split` event of a task not measured yet: from when (seconds of training) the
        budget pays for its first calibration."""
        self._deferred_sent = True
        return {"step": self._last_step, "steps": 0, "calls": self.calls, "calibrations": 0,
                "method": self.method, "budget": self.budget,
                "deferred_clock": round(self.affordable_at(k), 2),
                "training_seconds": round(self.training_seconds, 4),
                "clock_seconds": round(self.clock(), 3)}

    def split_fields(self) -> dict[str, Any]:
        """The `split` event's fields for the calls since the last one (then a new window)."""
        assert self.calibration is not None
        calls, reporting, steps = self._window
        waited = self._input_wait / steps if self._input_timed else None
        parts = split_parts(calls / steps, reporting / steps, self.calibration, waited)
        measured = list(self.measured)
        if self.method == WORKER_TIMED and parts["compute"] <= 0 < parts["communication"]:
            # its round trip, timed alone, took the whole step past its input wait (a busier
            # moment than its calls): the communication shown holds its compute too, which
            # is not told apart
            measured.remove("compute")
        self._window = [0.0, 0.0, 0]
        self._input_wait, self._input_timed = 0.0, False
        self._since_split = 0
        return {"step": self._last_step, "steps": steps, "calls": self.calls,
                "calibrations": self.calibrations, "method": self.method,
                "measured": measured, **{k: round(v, 7) for k, v in parts.items()},
                "probe_step": round(self.calibration.step, 7),
                "probe_reduce": round(self.calibration.reduce, 7),
                "probe_input": round(self.calibration.input, 7),
                "budget": self.budget,
                "calibration_seconds": round(self.calibration_seconds, 4),
                "setup_seconds": round(self.setup_seconds, 4),
                "training_seconds": round(self.training_seconds, 4),
                "clock_seconds": round(self.clock(), 3)}
