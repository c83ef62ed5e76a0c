"""A run ends when its training ends: the task's process exits right after its results are
written, without the interpreter's teardown (releasing TensorFlow's objects and tf.data's
threads, which took seconds at 50 steps and minutes at 3,000 with 16 replicas), whether it
finishes or fails. The proof is structural, so that load cannot decide it: the model file
registers an `atexit` handler, which the teardown would run and `os._exit` does not; and the
end is short beside the start-up measured in the same process."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from worker_helpers import finish, kinds, make_bundle, make_plan, start_task

pytestmark = pytest.mark.slow

REPLICAS = 8
STEPS = 20
TEARDOWN_MARK = "teardown-ran"

# A model file whose interpreter teardown leaves a mark beside it.
MODEL = f'''
import atexit
import pathlib

import keras
import numpy as np
import tensorflow as tf

atexit.register(lambda: pathlib.Path(__file__).with_name("{TEARDOWN_MARK}").write_text("ran"))


def _data(seed, n):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, (x[:, 0] > 0).astype("int32")))


def build_model():
    return keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(16, activation="relu"),
                             keras.layers.Dense(2)])


def make_dataset():
    return _data(0, 4096)


def make_validation_dataset():
    return _data(1, 64)
'''


def many_replica_bundle(root: Path) -> Path:
    return make_bundle(root, make_plan(strategy="mirrored", replicas_per_task=REPLICAS,
                                       steps=STEPS, steps_per_epoch=STEPS // 2),
                       user_model=MODEL)


def run_to_its_end(bundle: Path) -> tuple[int, list[dict[str, Any]], float, float]:
    """Exit code, events, and the moments (time.time) the task was started and ended."""
    launched = time.time()
    proc = start_task(bundle, "worker:0")
    while proc.poll() is None:
        time.sleep(0.05)
    exited = time.time()
    code, events = finish(proc, bundle)
    return code, events, launched, exited


def assert_ended_at_once(bundle: Path, events: list[dict[str, Any]], launched: float,
                         results_written: float, exited: float) -> None:
    assert not (bundle / TEARDOWN_MARK).exists(), "the interpreter's teardown ran"
    batches = kinds(events, "steps")
    assert batches and batches[-1]["first"] + batches[-1]["count"] - 1 == STEPS
    start_up = min(float(e["t"]) for e in batches) - launched  # import, build, trace
    assert exited - results_written < start_up / 2, (
        f"the process exited {exited - results_written:.1f} s after its results were "
        f"written; its start-up took {start_up:.1f} s")


def test_a_many_replica_run_exits_right_after_its_results_are_written(tmp_path: Path) -> None:
    bundle = many_replica_bundle(tmp_path)
    code, events, launched, exited = run_to_its_end(bundle)
    assert code == 0, events[-3:]
    # nothing is lost: the validation at the end, the model, the summaries are written
    assert [e["step"] for e in kinds(events, "validation")] == [STEPS // 2, STEPS]
    assert kinds(events, "model_saved")[-1]["step"] == STEPS
    assert (bundle / "output" / "model" / "model.keras").stat().st_size > 0
    summaries = list((bundle / "output" / "tensorboard" / "worker-0").glob("events.out.*"))
    assert summaries and summaries[0].stat().st_size > 1000
    assert_ended_at_once(bundle, events, launched, kinds(events, "finished")[-1]["t"], exited)


def test_a_many_replica_run_that_fails_after_training_exits_at_once(tmp_path: Path) -> None:
    """The model cannot be written (a file where its folder goes): the failure is reported
    and the process ends without waiting for the input pipeline it leaves behind."""
    bundle = many_replica_bundle(tmp_path)
    (bundle / "output").mkdir()
    (bundle / "output" / "model").write_text("in the way")
    code, events, launched, exited = run_to_its_end(bundle)
    assert code == 1
    failed = kinds(events, "failed")[-1]
    assert "saving the trained model" in failed["error"]
    assert_ended_at_once(bundle, events, launched, failed["t"], exited)
