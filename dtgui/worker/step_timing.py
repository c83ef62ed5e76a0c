"""Where a training task's step time goes, measured on the run itself (no TensorFlow here).

Every call's wall time and the time spent reporting it are counted as training runs. A short
calibration, after the fourth call and then every CALIBRATE_EVERY_CALLS calls or more (so
that the probes' steps stay under 1 % of the steps between two calibrations, whatever a
step costs: `next_calibration`), times three
probes (`dtgui.worker.loop.Probes`): the full training step on a batch already on the devices
(forward, backward, gradient all-reduce, update; the variables are put back afterwards), the
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
calibrate: MultiWorkerMirrored workers must run the probes' collectives together.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

SPLIT_VARIABLE = "DTGUI_STEP_SPLIT"  # "0": no calibration, no split (to measure its cost)
FIRST_CALIBRATION_CALL = 4  # the first call traces; the next ones still settle the call size
CALIBRATE_EVERY_CALLS = 500  # at least; ~100 s at the usual 0.2 s call
PROBE_REPEATS = 3  # each calibration probe runs this many times; the median counts
PROBE_SHARE = 0.01  # the probes' steps, at most this share of the steps between calibrations
SPLIT_EVERY_CALLS = 25  # ~5 s at the usual 0.2 s call
PARTS = ("input", "compute", "communication", "reporting")


def enabled() -> bool:
    return os.environ.get(SPLIT_VARIABLE, "1") != "0"


def probe_steps(k: int) -> int:
    """n, for probes of n then 2n steps (their difference is the measure: Probes): a
    sixteenth of the current call (at least 4); each probe runs three times (the median
    counts), so a calibration takes about as long as a call."""
    return max(4, k // 16)


def probed_steps(n: int) -> int:
    """Steps a calibration with probes of n runs: n then 2n steps, PROBE_REPEATS times, for
    the training step and for the all-reduce (counted as a step too: an upper bound)."""
    return 2 * PROBE_REPEATS * 3 * n


def next_calibration(call: int, k: int) -> int:
    """The call after which the next calibration comes, one made after `call` with calls of
    `k` steps: CALIBRATE_EVERY_CALLS calls later, or later still when steps are so slow that
    calls hold one or a few (a calibration's probes are then many calls' worth). Calls and
    their size only, never time: MultiWorkerMirrored workers agree on both, so they
    calibrate at the same call, as their collectives must."""
    probed = probed_steps(probe_steps(k))
    return call + max(CALIBRATE_EVERY_CALLS, math.ceil(probed / (PROBE_SHARE * max(1, k))))


@dataclass
class Calibration:
    """Seconds per step of the two probes (the latest calibration)."""

    step: float  # the full training step on a cached batch
    reduce: float  # the gradient all-reduce alone
    input: float = float("inf")  # the input pipeline alone, making one step's batches
    setup: float = 0.0  # seconds of this calibration spent making the probes (traces)


def split_parts(call: float, reporting: float, calibration: Calibration) -> dict[str, float]:
    """Seconds per step by part, from a window's call time per step and reporting per step."""
    cached = min(calibration.step, call)
    waiting = min(max(0.0, call - cached), calibration.input)
    communication = min(calibration.reduce, call - waiting)
    return {"input": waiting, "compute": max(0.0, call - waiting - communication),
            "communication": communication, "reporting": reporting}


class StepTiming:
    """Counts a task's calls and decides when to calibrate and to report the split."""

    def __init__(self, active: bool = True) -> None:
        self.active = active and enabled()
        self.calls = 0
        self.calibration: Calibration | None = None
        self.calibration_seconds = 0.0  # what the probes cost, their making excepted
        self.calibrations = 0
        self.setup_seconds = 0.0  # making the probes (tracing them) once
        self.training_seconds = 0.0  # calls and reporting, the first call excepted
        self._window = [0.0, 0.0, 0]  # call seconds, reporting seconds, steps
        self._since_split = 0
        self._last_step = 0
        self._next_calibration = FIRST_CALIBRATION_CALL

    def call(self, steps: int, seconds: float) -> None:
        """A training call of `steps` steps took `seconds` (to its results on the host)."""
        self.calls += 1
        if self.calls == 1:
            return  # it traced the training function: not a measure of a step
        self._window[0] += seconds
        self._window[2] += steps
        self.training_seconds += seconds
        self._since_split += 1

    def reported(self, seconds: float, last_step: int) -> None:
        """Reporting that call took `seconds`."""
        self._last_step = last_step
        if self.calls > 1:
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
        parts = split_parts(calls / steps, reporting / steps, self.calibration)
        self._window = [0.0, 0.0, 0]
        self._since_split = 0
        return {"step": self._last_step, "steps": steps, "calls": self.calls,
                "calibrations": self.calibrations, "method": "calibrated",
                "measured": list(PARTS), **{k: round(v, 7) for k, v in parts.items()},
                "probe_step": round(self.calibration.step, 7),
                "probe_reduce": round(self.calibration.reduce, 7),
                "probe_input": round(self.calibration.input, 7),
                "calibration_seconds": round(self.calibration_seconds, 4),
                "setup_seconds": round(self.setup_seconds, 4),
                "training_seconds": round(self.training_seconds, 4)}
