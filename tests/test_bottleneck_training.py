"""Where a real training run's step time goes: a model whose data set sleeps per batch is
input-bound, with the input advice; the same model on fast data is compute-bound. The CPU
other processes take, when the machine's telemetry says they do, is a line after it. Both run at
once (Mirrored x2 on logical CPUs, auto call size), each measuring itself: 40 steps are
too short to measure within 5 % of their training time, so they are allowed any cost. Both
capture TensorFlow's profiler over 10 steps, and what the profile says of the input agrees."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from worker_helpers import finish, kinds, make_bundle, make_plan, start_task

from dtgui.core.events import parse_line
from dtgui.core.measure.bottleneck import (
    BOUND_SHARE,
    COMMUNICATION,
    COMPUTE,
    CPU,
    HYSTERESIS,
    INPUT,
    OTHERS_SHARE,
    RunFacts,
    StepSplit,
    verdict,
)
from dtgui.core.run_curves import RunCurves
from dtgui.launch.trackers.xprof_input import profile_inputs
from dtgui.worker.step_timing import BUDGET_VARIABLE, FIRST_CALIBRATION_CALL

pytestmark = pytest.mark.slow

MODEL = '''
import time

import keras
import numpy as np
import tensorflow as tf

SLEEP = {sleep}  # seconds per 64 examples


def build_model():
    return keras.Sequential([keras.Input((256,)), keras.layers.Dense(256, activation="relu"),
                             keras.layers.Dense(256, activation="relu"), keras.layers.Dense(3)])


def make_dataset():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2048, 256)).astype("float32")
    y = rng.integers(0, 3, size=2048).astype("int64")
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if not SLEEP:
        return ds

    def slow(features, labels):
        time.sleep(SLEEP)
        return features, labels

    def slowed(features, labels):
        out = tf.py_function(slow, [features, labels], (tf.float32, tf.int64))
        out[0].set_shape(features.shape)
        out[1].set_shape(labels.shape)
        return out

    return ds.batch(64).map(slowed).unbatch()


def make_loss():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)
'''


def run_verdict(events: list[dict[str, Any]]) -> tuple[RunCurves, Any]:
    """The run's verdict as the dashboard decides it: its splits over their window, the
    machine's CPU load from its telemetry (a user's model: its input pipeline is theirs)."""
    curves = RunCurves()
    curves.add_events(e for e in (parse_line(json.dumps(x)) for x in events) if e is not None)
    return curves, verdict(curves.splits.values(), RunFacts(replicas=2, per_replica_batch=32),
                           loads=curves.cpu_loads())


def test_slow_data_is_input_bound_and_fast_data_compute_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BUDGET_VARIABLE, "1e6")  # any cost
    plan = make_plan(strategy="mirrored", replicas_per_task=2, per_replica_batch=32,
                     steps=40, steps_per_epoch=20, steps_per_call=0, profile_steps=[21, 30])
    runs = {sleep: make_bundle(tmp_path / f"sleep{sleep}", plan, MODEL.format(sleep=sleep))
            for sleep in (0.0, 0.1)}
    procs = {sleep: start_task(bundle, "worker:0") for sleep, bundle in runs.items()}
    found = {}
    for sleep, proc in procs.items():
        code, events = finish(proc, runs[sleep], timeout=240)
        assert code == 0, events[-3:]
        splits = kinds(events, "split")
        assert splits, "no split event"
        # the first split goes out with the first calibration, at the first call it may come
        assert splits[0]["calibrations"] == 1 and splits[0]["calls"] == FIRST_CALIBRATION_CALL
        last = StepSplit.from_event("worker:0", splits[-1])
        assert last is not None and last.measured == (INPUT, COMPUTE, COMMUNICATION,
                                                      "reporting")
        # the all-reduce was timed: a part of its own (`measured` above). On 2 CPU replicas it
        # is a fraction of a millisecond, within the calibration's noise, so it may read 0 in
        # both runs; a measured communication share is proven over a throttled link
        # (test_doctor.py)
        assert last.communication >= 0 and last.reporting > 0
        assert splits[-1]["step"] == 40 and last.calibration_seconds > 0
        # the calibration runs reuse the training call's trace: making them (the all-reduce run's
        # trace) takes a fraction of the first call, which traced the training call
        timeline = kinds(events, "finished")[-1]["timeline"]
        first_call = timeline[0][1]
        assert 0 < splits[-1]["setup_seconds"] < 0.5 * first_call, (splits[-1], first_call)
        # the cost shown is what measuring took, making the runs included, and it took place
        # between the calls (the run's wall time after its first call holds it)
        assert last.calibration_seconds >= last.setup_seconds > 0
        assert last.calibration_seconds <= timeline[-1][1] - timeline[0][1]
        assert last.cost_share == last.calibration_seconds / last.clock_seconds
        assert 0 < last.training_seconds < last.clock_seconds
        found[sleep] = run_verdict(events)
    curves, slow_verdict = found[0.1]
    slow = curves.splits["worker:0"]
    assert slow.share(INPUT) > 0.6, slow
    # the step's part leads, input wait and its advice; the machine full of other work is a
    # line after it
    assert slow_verdict.limit == INPUT
    assert "prefetch(tf.data.AUTOTUNE)" in slow_verdict.text
    assert slow_verdict.figure.startswith("input wait ")
    assert "on worker:0" in slow_verdict.figure
    if slow_verdict.crowded is not None:
        assert slow_verdict.crowded.limit == CPU
        assert slow_verdict.crowded.share >= OTHERS_SHARE
        assert "a sleep is not sped up" in slow_verdict.crowded.advice
    # fast data is never called input-bound on an idle machine: it computes; on a machine full
    # of other work, which slowed its steps (the input's too), that is said beside the part
    curves, fast_verdict = found[0.0]
    fast = curves.splits["worker:0"]
    if fast_verdict.crowded is not None:
        loads = curves.cpu_loads()
        assert loads and max(load.others for load in loads) >= OTHERS_SHARE, loads
        assert "other programs" in fast_verdict.crowded.advice or \
            "close or pause them" in fast_verdict.crowded.advice
        assert fast_verdict.limit in (COMPUTE, INPUT)
    else:
        assert fast_verdict.limit == COMPUTE and fast.share(INPUT) < BOUND_SHARE + HYSTERESIS
        assert "XLA" in fast_verdict.advice
    # what TensorFlow's profiler says of the same steps (both runs captured steps 21-30), as
    # the card reads it: the slow data's steps wait for their input, the fast data's barely
    said = {sleep: profile_inputs(bundle / "output") for sleep, bundle in runs.items()}
    [slow_profile], [fast_profile] = said[0.1], said[0.0]
    for found_profile in (slow_profile, fast_profile):
        assert (found_profile.task, found_profile.first, found_profile.last) == \
            ("worker:0", 21, 30) and found_profile.seconds > 0, found_profile
    assert slow_profile.share > 0.5 > fast_profile.share, said
    assert slow_profile.share > slow.share(INPUT) - 0.3, (slow_profile, slow)
