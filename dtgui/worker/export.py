"""The trained model out of the run: ``<out>/model/`` (and ``<out>/model/best/``).

``model.keras`` reloads with ``keras.models.load_model``; ``saved_model/`` is a SavedModel for
serving (``tf.saved_model.load(path).serve(inputs)``, TF Serving); ``sample.npz`` holds a batch
of inputs and what the training process predicted for them, to check a deployment against.
Only the chief writes them.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import keras
import numpy as np

MODEL_DIR = "model"
SAMPLE_EXAMPLES = 16


def model_dir(out_dir: str, kind: str) -> str:
    return os.path.join(out_dir, MODEL_DIR) if kind == "final" \
        else os.path.join(out_dir, MODEL_DIR, kind)


def save_model(model: keras.Model, out_dir: str, kind: str, sample: Any) -> dict[str, str]:
    """Write the model ("final" or "best"); returns the paths relative to `out_dir` (and
    `savedmodel_error` when the SavedModel could not be exported)."""
    folder = model_dir(out_dir, kind)
    keras_path = os.path.join(folder, "model.keras")
    served = os.path.join(folder, "saved_model")
    os.makedirs(folder, exist_ok=True)
    shutil.rmtree(served, ignore_errors=True)  # a better "best" replaces the last one
    model.save(keras_path)
    paths = {"path": os.path.relpath(keras_path, out_dir)}
    try:
        # Exported from the saved file reloaded here, not from the training model: under
        # ParameterServer its variables live on the parameter servers, which would each
        # write their part of the export on their own machine.
        keras.models.load_model(keras_path).export(served, verbose=False)
        paths["savedmodel"] = os.path.relpath(served, out_dir)
    except Exception as exc:  # noqa: BLE001 - the .keras file is saved: report, go on
        paths["savedmodel_error"] = f"{type(exc).__name__}: {exc}"[:300]
    if sample is not None:
        inputs = np.asarray(sample)[:SAMPLE_EXAMPLES]
        outputs = np.asarray(model(inputs, training=False))
        np.savez(os.path.join(folder, "sample.npz"), inputs=inputs, outputs=outputs)
    return paths


class ModelSaver:
    """Saves the final model, and the best one by validation loss when the plan asks; says so
    with `model_saved` events. On every task but the chief it does nothing."""

    def __init__(self, model: keras.Model, out_dir: str, sample: Any, events: Any,
                 keep_best: bool, active: bool) -> None:
        self.model = model
        self.out_dir = out_dir
        self.sample = sample
        self.events = events
        self.keep_best = keep_best
        self.active = active
        self.best_loss = float("inf")

    def consider(self, step: int, val_loss: float) -> None:
        if not (self.active and self.keep_best) or not val_loss < self.best_loss:
            return
        self.best_loss = val_loss
        self._save("best", step, metric="val_loss", value=val_loss)

    def final(self, step: int) -> None:
        if self.active:
            self._save("final", step)

    def _save(self, kind: str, step: int, **fields: Any) -> None:
        paths = save_model(self.model, self.out_dir, kind, self.sample)
        error = paths.pop("savedmodel_error", "")
        if error:
            self.events.log(f"the {kind} model is saved as {paths['path']}, but its SavedModel "
                            f"export failed ({error}): register the model's custom objects "
                            f"(keras.saving.register_keras_serializable) to export it",
                            level="warning")
        self.events.emit("model_saved", role=kind, step=step, **paths, **fields)
