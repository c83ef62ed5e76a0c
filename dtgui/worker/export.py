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
    """Write the model ("final" or "best"); returns the paths relative to `out_dir`."""
    folder = model_dir(out_dir, kind)
    keras_path = os.path.join(folder, "model.keras")
    served = os.path.join(folder, "saved_model")
    os.makedirs(folder, exist_ok=True)
    shutil.rmtree(served, ignore_errors=True)  # a better "best" replaces the last one
    model.save(keras_path)
    model.export(served, verbose=False)
    if sample is not None:
        inputs = np.asarray(sample)[:SAMPLE_EXAMPLES]
        outputs = np.asarray(model(inputs, training=False))
        np.savez(os.path.join(folder, "sample.npz"), inputs=inputs, outputs=outputs)
    return {"path": os.path.relpath(keras_path, out_dir),
            "savedmodel": os.path.relpath(served, out_dir)}


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
        self.events.emit("model_saved", role=kind, step=step, **paths, **fields)
