"""Training real models (real TensorFlow, in subprocesses): validation and metrics exact across
workers, no accuracy for a regression, learning-rate schedules, gradient accumulation, and the
trained model saved, reloadable and servable."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest
from worker_helpers import (
    PYTHON,
    finish,
    free_ports,
    kinds,
    log_text,
    make_bundle,
    make_plan,
    start_task,
    write_package,
)

pytestmark = pytest.mark.slow

REGRESSION_MODEL = '''
import keras
import numpy as np
import tensorflow as tf


def _data(seed, n):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype("float32")
    y = (x @ np.array([[1.5], [-2.0], [0.5]], "float32") + 0.3).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, y))


def build_model():
    return keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])


def make_dataset():
    return _data(0, 256)


def make_validation_dataset():
    return _data(1, 50)


def make_loss():
    return keras.losses.MeanSquaredError(reduction="none")


def make_metrics():
    return [keras.metrics.MeanAbsoluteError()]
'''

CLASSIFIER_MODEL = '''
import keras
import numpy as np
import tensorflow as tf


def _data(seed, n):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6)).astype("float32")
    y = (np.abs(x[:, :3]).argmax(axis=1) + 3 * (x[:, 3] > 0)).astype("int32")
    return tf.data.Dataset.from_tensor_slices((x, y))


def build_model():
    return keras.Sequential([keras.Input(shape=(6,)), keras.layers.Dense(16, activation="relu"),
                             keras.layers.Dense(6)])


def make_dataset():
    return _data(0, 512)


def make_validation_dataset():
    return _data(1, 101)  # not a multiple of the batch: the last one is partial


def make_metrics():
    return [keras.metrics.SparseTopKCategoricalAccuracy(k=2, name="top_2"), "accuracy"]
'''


def wait(procs: dict[str, Any], bundles: dict[str, Path], task: str = "worker:0",
         ) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for name, proc in procs.items():
        code, events = finish(proc, bundles[name], task, timeout=240)
        assert code == 0 and not kinds(events, "failed"), \
            (name, kinds(events, "failed"), log_text(bundles[name], task)[-3000:])
        out[name] = events
    return out


def evaluate_saved(bundle: Path, model_file: Path) -> dict[str, Any]:
    """In a fresh process: reload output/model/model.keras and the SavedModel, predict the
    saved sample, and evaluate the validation data directly (numpy, float64)."""
    code = f"""
import json, sys
import importlib.util
import keras, numpy as np, tensorflow as tf
spec = importlib.util.spec_from_file_location("m", {str(model_file)!r})
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
out = {str(bundle / "output" / "model")!r}
model = keras.models.load_model(out + "/model.keras")
sample = np.load(out + "/sample.npz")
served = tf.saved_model.load(out + "/saved_model")
x, y = (np.concatenate(a) for a in zip(*[(a.numpy()[None], b.numpy()[None])
                                         for a, b in m.make_validation_dataset()]))
logits = model.predict(x, verbose=0).astype("float64")
shifted = logits - logits.max(axis=1, keepdims=True)
logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
top2 = np.argsort(-logits, axis=1)[:, :2]
print(json.dumps({{
    "same_keras": bool(np.array_equal(model.predict(sample["inputs"], verbose=0),
                                      sample["outputs"])),
    "same_served": bool(np.array_equal(served.serve(sample["inputs"]).numpy(),
                                       sample["outputs"])),
    "loss": float(-logp[np.arange(len(y)), y].mean()),
    "top_2": float((top2 == y[:, None]).any(axis=1).mean()),
    "accuracy": float((logits.argmax(axis=1) == y).mean()),
}}))
"""
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=180,
                          env={"CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3",
                               "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    scores: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return scores


def test_regression_validation_schedule_and_accumulation(tmp_path: Path) -> None:
    """Several runs side by side (each imports TensorFlow, so they start together)."""
    base = make_plan(strategy="one_device", steps=6, steps_per_epoch=3, per_replica_batch=16,
                     learning_rate=0.01)
    variants: dict[str, tuple[dict[str, Any], str | None]] = {
        "regression": ({**base}, REGRESSION_MODEL),
        "schedule": ({**base, "steps": 20, "steps_per_epoch": 10, "optimizer": "adamw",
                      "weight_decay": 0.01, "lr_schedule": "warmup_cosine", "warmup_steps": 5,
                      "steps_per_call": 3}, None),
        # one update over 4 micro-batches of 8 = one update over a batch of 32
        "micro": ({**base, "steps": 1, "per_replica_batch": 8, "grad_accumulation": 4,
                   "optimizer": "sgd", "momentum": 0.0, "learning_rate": 0.5}, REGRESSION_MODEL),
        "whole": ({**base, "steps": 1, "per_replica_batch": 32, "optimizer": "sgd",
                   "momentum": 0.0, "learning_rate": 0.5}, REGRESSION_MODEL),
    }
    bundles = {name: make_bundle(tmp_path / name, plan, user_model=model)
               for name, (plan, model) in variants.items()}
    events = wait({name: start_task(bundle, "worker:0") for name, bundle in bundles.items()},
                  bundles)

    regression = events["regression"]
    assert all("accuracy" not in json.dumps(e) for e in regression)  # no guessed accuracy
    assert [e["metrics"] for e in kinds(regression, "epoch")] == [{}, {}]
    validations = kinds(regression, "validation")
    assert [v["step"] for v in validations] == [3, 6] and validations[0]["examples"] == 50
    assert all(set(v["metrics"]) == {"mean_absolute_error"} and math.isfinite(v["loss"])
               for v in validations)

    # AdamW with linear warm-up then cosine: the recorded learning rate is the schedule's
    recorded = {e["first"] + e["count"] - 1: e["lr"] for e in kinds(events["schedule"], "steps")}
    assert len(recorded) >= 5
    for step, lr in recorded.items():
        i = step - 1  # the schedule counts updates from 0
        expected = 0.01 * i / 5 if i < 5 else \
            0.01 * 0.5 * (1 + math.cos(math.pi * (i - 5) / 15))
        assert lr == pytest.approx(expected, rel=1e-5, abs=1e-9), step
    assert next(e["metrics"] for e in kinds(events["schedule"], "epoch")).keys() == {"accuracy"}

    weights = {}
    for name in ("micro", "whole"):
        code = ("import keras, json, sys; m = keras.models.load_model(sys.argv[1]); "
                "print(json.dumps([w.tolist() for w in m.get_weights()]))")
        out = subprocess.run([PYTHON, "-c", code,
                              str(bundles[name] / "output" / "model" / "model.keras")],
                             capture_output=True, text=True, timeout=120, check=True)
        weights[name] = json.loads(out.stdout.strip().splitlines()[-1])
    flat = {k: [x for w in v for row in (w if isinstance(w[0], list) else [w]) for x in row]
            for k, v in weights.items()}
    assert flat["micro"] == pytest.approx(flat["whole"], rel=1e-5, abs=1e-6)
    loss = {name: kinds(events[name], "steps")[0]["loss"] for name in ("micro", "whole")}
    assert loss["micro"] == pytest.approx(loss["whole"], rel=1e-5)


ZERO_LINEAR_MODEL = '''
import keras
import numpy as np
import tensorflow as tf


def build_model():
    return keras.Sequential([keras.Input(shape=(4,)),
                             keras.layers.Dense(1, kernel_initializer="zeros")])


def make_dataset():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4)).astype("float32")
    # small targets: the float16 gradients of the scaled loss do not overflow (the first
    # update would be skipped) while their norm stays far above clip_norm
    y = (0.05 * (x @ np.array([3.0, -2.0, 1.0, 5.0]) + 4.0)).astype("float32")[:, None]
    return tf.data.Dataset.from_tensor_slices((x, y))


def make_loss():
    return keras.losses.MeanSquaredError()
'''


def test_clipping_bounds_the_update_of_every_replica_together_and_under_float16(
        tmp_path: Path) -> None:
    """One SGD step (rate 1) from zero weights with the gradient's norm far above clip_norm:
    the weights move by exactly clip_norm, the gradient summed over both replicas clipped
    (clipping each replica's part would move them less), and under mixed_float16 too (the
    gradient there is of the scaled loss)."""
    base = make_plan(steps=1, steps_per_epoch=1, per_replica_batch=32, optimizer="sgd",
                     momentum=0.0, learning_rate=1.0, clip_norm=0.001)
    variants = {
        "mirrored": {**base, "strategy": "mirrored", "replicas_per_task": 2},
        "float16": {**base, "precision": "mixed_float16"},
    }
    bundles = {name: make_bundle(tmp_path / name, plan, user_model=ZERO_LINEAR_MODEL)
               for name, plan in variants.items()}
    wait({name: start_task(bundle, "worker:0") for name, bundle in bundles.items()}, bundles)
    code = ("import keras, json, sys, numpy as np; m = keras.models.load_model(sys.argv[1]); "
            "print(json.dumps(float(np.sqrt(sum(float((w.astype('float64') ** 2).sum()) "
            "for w in m.get_weights())))))")
    for name, bundle in bundles.items():
        out = subprocess.run([PYTHON, "-c", code,
                              str(bundle / "output" / "model" / "model.keras")],
                             capture_output=True, text=True, timeout=120, check=True)
        moved = json.loads(out.stdout.strip().splitlines()[-1])
        assert moved == pytest.approx(0.001, rel=1e-3), name


def test_validation_metrics_are_exact_and_equal_on_every_worker(tmp_path: Path) -> None:
    """MultiWorkerMirrored, 2 workers: each reports the same validation, and it equals a
    direct evaluation of the saved model on the same data; the saved model and its SavedModel
    predict exactly what the training process predicted."""
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    plan = make_plan(strategy="multi_worker_mirrored", cluster=cluster, steps=8,
                     steps_per_epoch=4, per_replica_batch=16, learning_rate=0.01,
                     save_best=True)
    bundle = make_bundle(tmp_path, plan, user_model=CLASSIFIER_MODEL)
    procs = [start_task(bundle, f"worker:{i}", cluster) for i in range(2)]
    results = [finish(p, bundle, f"worker:{i}", timeout=240) for i, p in enumerate(procs)]
    for i, (code, events) in enumerate(results):
        assert code == 0 and not kinds(events, "failed"), log_text(bundle, f"worker:{i}")[-3000:]
    first, second = (kinds(events, "validation") for _, events in results)
    assert [v["step"] for v in first] == [4, 8]
    assert first == [{**v, "t": f["t"], "task": f["task"]} for v, f in zip(second, first,
                                                                           strict=True)]
    assert first[-1]["examples"] == 101 and set(first[-1]["metrics"]) == {"top_2", "accuracy"}

    saved = kinds(results[0][1], "model_saved")
    assert {s["role"] for s in saved} == {"best", "final"} and not kinds(results[1][1],
                                                                          "model_saved")
    direct = evaluate_saved(bundle, bundle / "user_model.py")
    assert direct["same_keras"] and direct["same_served"]
    last = first[-1]
    assert last["loss"] == pytest.approx(direct["loss"], rel=1e-5)
    assert last["metrics"]["top_2"] == pytest.approx(direct["top_2"], abs=1e-6)
    assert last["metrics"]["accuracy"] == pytest.approx(direct["accuracy"], abs=1e-6)
    assert (bundle / "output" / "model" / "best" / "model.keras").is_file()


def test_a_metric_that_is_not_a_mean_is_refused_with_the_reason(tmp_path: Path) -> None:
    model = CLASSIFIER_MODEL.replace('"accuracy"]', 'keras.metrics.AUC()]')
    bundle = make_bundle(tmp_path, make_plan(steps=2), user_model=model)
    code, events = finish(start_task(bundle, "worker:0"), bundle, timeout=180)
    assert code == 1
    (failed,) = kinds(events, "failed")
    assert "not a mean of per-example values" in failed["error"]



def test_a_model_package_runs_from_the_bundle_and_a_missing_data_file_is_refused(
        tmp_path: Path) -> None:
    """The model file's folder is bundled: a sibling module imports and a data file beside the
    file is read. Without the data file the check of the bundle's copy refuses the launch."""
    from dtgui.core.plans.plan import ModelFile, Plan
    from dtgui.core.plans.strategies import Strategy
    from dtgui.launch.start.pipeline import LaunchError, launch_plan

    net = write_package(tmp_path / "proj")
    plan = Plan(run_name="package", strategy=Strategy.ONE_DEVICE, replicas_per_task=1, steps=3,
                steps_per_epoch=3, checkpoint_every=0,
                model=ModelFile(str(net), str(tmp_path / "proj")))
    controller = launch_plan(plan, tmp_path / "runs")
    assert controller.wait(180) and controller.state == "finished", controller.message
    assert (controller.bundle.output / "model" / "model.keras").is_file()

    (tmp_path / "proj" / "mymodels" / "points.csv").unlink()
    with pytest.raises(LaunchError, match=r"fails in the run's bundle.*points\.csv"):
        launch_plan(plan.with_changes(run_name="package-broken"), tmp_path / "runs")
    assert not (tmp_path / "runs" / "package-broken").exists()
