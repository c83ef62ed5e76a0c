"""A run ends when its training ends: the task's process exits right after its results are
written, however many replicas fed from its input pipeline (16 here, the case where tf.data's
teardown took seconds at 50 steps and minutes at 3,000), whether it finishes or fails."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from worker_helpers import finish, kinds, make_bundle, make_plan, start_task

pytestmark = pytest.mark.slow

REPLICAS = 16
STEPS = 50
# From the end of the run's results (`finished`, or `failed`) to the task's exit: leaving the
# training process and its supervisor takes well under a second here; releasing TensorFlow's
# input pipeline and objects took 4-10 s at this size on 2 loaded cores.
END_SECONDS = 3.0
# From the last step to the exit: the last validation (traced half-way) and the model
# written (model.keras, reloaded for the SavedModel), then the end above.
LAST_STEP_SECONDS = 15.0


def sixteen_replica_bundle(root: Path) -> Path:
    return make_bundle(root, make_plan(strategy="mirrored", replicas_per_task=REPLICAS,
                                       steps=STEPS, steps_per_epoch=STEPS // 2))


def run_to_its_end(bundle: Path) -> tuple[int, list[dict[str, Any]], float]:
    """Exit code, events and the moment (time.time) the task's process ended."""
    proc = start_task(bundle, "worker:0")
    while proc.poll() is None:
        time.sleep(0.05)
    exited = time.time()
    code, events = finish(proc, bundle)
    return code, events, exited


def last_step_time(events: list[dict[str, Any]]) -> float:
    batches = kinds(events, "steps")
    assert batches and batches[-1]["first"] + batches[-1]["count"] - 1 == STEPS
    return max(float(e["t"]) for e in batches)


def test_a_16_replica_run_exits_right_after_its_last_step(tmp_path: Path) -> None:
    bundle = sixteen_replica_bundle(tmp_path)
    code, events, exited = run_to_its_end(bundle)
    assert code == 0, events[-3:]
    finished = kinds(events, "finished")[-1]
    last = last_step_time(events)
    # nothing is lost: the validation at the end, the model, the summaries are written
    assert [e["step"] for e in kinds(events, "validation")] == [STEPS // 2, STEPS]
    assert kinds(events, "model_saved")[-1]["step"] == STEPS
    assert (bundle / "output" / "model" / "model.keras").stat().st_size > 0
    summaries = list((bundle / "output" / "tensorboard" / "worker-0").glob("events.out.*"))
    assert summaries and summaries[0].stat().st_size > 1000
    assert exited - finished["t"] < END_SECONDS, (
        f"the process exited {exited - finished['t']:.1f} s after its results were written")
    assert exited - last < LAST_STEP_SECONDS, (
        f"the process exited {exited - last:.1f} s after its last step")


def test_a_16_replica_run_that_fails_after_training_exits_at_once(tmp_path: Path) -> None:
    """The model cannot be written (a file where its folder goes): the failure is reported
    and the process ends without waiting for the input pipeline it leaves behind."""
    bundle = sixteen_replica_bundle(tmp_path)
    (bundle / "output").mkdir()
    (bundle / "output" / "model").write_text("in the way")
    code, events, exited = run_to_its_end(bundle)
    assert code == 1
    failed = kinds(events, "failed")[-1]
    assert "saving the trained model" in failed["error"]
    last = last_step_time(events)
    assert exited - failed["t"] < END_SECONDS, (
        f"the process exited {exited - failed['t']:.1f} s after reporting its failure")
    assert exited - last < LAST_STEP_SECONDS, (
        f"the process exited {exited - last:.1f} s after its last step")
