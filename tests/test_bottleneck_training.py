"""Where a real training run's step time goes: a model whose data set sleeps per batch is
input-bound, with the input advice; the same model on fast data is compute-bound. Both run
at once (Mirrored x2 on logical CPUs, auto call size), each measuring itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from worker_helpers import finish, kinds, make_bundle, make_plan, start_task

from dtgui.core.bottleneck import COMMUNICATION, COMPUTE, INPUT, StepSplit, verdict

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


def test_slow_data_is_input_bound_and_fast_data_compute_bound(tmp_path: Path) -> None:
    plan = make_plan(strategy="mirrored", replicas_per_task=2, per_replica_batch=32,
                     steps=40, steps_per_epoch=20, steps_per_call=0)
    runs = {sleep: make_bundle(tmp_path / f"sleep{sleep}", plan, MODEL.format(sleep=sleep))
            for sleep in (0.0, 0.1)}
    procs = {sleep: start_task(bundle, "worker:0") for sleep, bundle in runs.items()}
    found = {}
    comms: list[float] = []
    for sleep, proc in procs.items():
        code, events = finish(proc, runs[sleep], timeout=240)
        assert code == 0, events[-3:]
        splits = kinds(events, "split")
        assert splits, "no split event"
        last = StepSplit.from_event("worker:0", splits[-1])
        assert last is not None and last.measured == (INPUT, COMPUTE, COMMUNICATION,
                                                      "reporting")
        # the all-reduce was timed: a part of its own (on 2 CPU replicas it is a fraction of a
        # millisecond, within the calibration's noise on a loaded machine, so it may read 0)
        assert last.communication >= 0 and last.reporting > 0
        comms.append(last.communication)
        assert splits[-1]["step"] == 40 and last.calibration_seconds > 0
        # the calibration runs reuse the training call's trace: making them (the all-reduce run's
        # trace) takes a fraction of the first call, which traced the training call
        first_call = kinds(events, "finished")[-1]["timeline"][0][1]
        assert 0 < splits[-1]["setup_seconds"] < 0.5 * first_call, (splits[-1], first_call)
        found[sleep] = (last, verdict([last]))
    assert max(comms) > 0, comms  # measured, in one run at least
    slow, slow_verdict = found[0.1]
    assert slow_verdict.limit == INPUT and slow.share(INPUT) > 0.6, slow
    assert "prefetch(tf.data.AUTOTUNE)" in slow_verdict.text
    assert slow_verdict.figure.startswith("input wait ") and "on worker:0" in slow_verdict.figure
    fast, fast_verdict = found[0.0]
    assert fast_verdict.limit == COMPUTE and fast.share(INPUT) < 0.25, fast
    assert "XLA" in fast_verdict.advice
