"""Demo data (the bundled digits set) and demo model; choosing the plan's model source."""

from __future__ import annotations

import os
import sys
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from .model_file import ModelSource, UserError, load_model_file
from .plan import DEMO_KIND, FILE_KIND, DemoModel, ModelFile, Plan

DEMO_DATA = os.path.join("data", "digits.npz")
NUM_CLASSES = 10


def load_digits(bundle_dir: str) -> tuple[np.ndarray, np.ndarray]:
    """Features (N, 64) float32 in [0, 1] and labels (N,) int32 from data/digits.npz."""
    path = os.path.join(bundle_dir, DEMO_DATA)
    if not os.path.isfile(path):
        raise UserError(f"The demo data is missing: {path} (the bundle should contain it)")
    with np.load(path) as npz:
        images = npz["images"]
        labels = npz["labels"]
    features = (images.reshape(len(images), -1).astype(np.float32) / 16.0).clip(0.0, 1.0)
    return features, labels.astype(np.int32)


DEMO_VALIDATION = 297  # the last digits are held out for validation (1500 to train)


def demo_dataset(bundle_dir: str) -> tf.data.Dataset:
    """Unbatched (features, label) pairs of the digits the demo trains on."""
    features, labels = load_digits(bundle_dir)
    return tf.data.Dataset.from_tensor_slices((features[:-DEMO_VALIDATION],
                                               labels[:-DEMO_VALIDATION]))


def demo_validation_dataset(bundle_dir: str) -> tf.data.Dataset:
    """The held-out digits (never trained on)."""
    features, labels = load_digits(bundle_dir)
    return tf.data.Dataset.from_tensor_slices((features[-DEMO_VALIDATION:],
                                               labels[-DEMO_VALIDATION:]))


def build_demo_model() -> keras.Model:
    """A small MLP: 64 -> 128 relu -> 64 relu -> 10 logits (float32 so mixed precision works)."""
    return keras.Sequential(
        [
            keras.Input(shape=(64,), name="pixels"),
            keras.layers.Dense(128, activation="relu", name="hidden1"),
            keras.layers.Dense(64, activation="relu", name="hidden2"),
            keras.layers.Dense(NUM_CLASSES, dtype="float32", name="logits"),
        ],
        name="digits_mlp",
    )


def default_loss() -> keras.losses.Loss:
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


def model_source(plan: Plan, bundle_dir: str) -> ModelSource:
    """The demo, or the user's model file (its path relative to the bundle)."""
    model = plan.model
    if isinstance(model, DemoModel):
        return ModelSource(kind="demo", path="", build_model=build_demo_model,
                           make_dataset=lambda: demo_dataset(bundle_dir),
                           make_loss=None, num_classes=NUM_CLASSES,
                           make_validation_dataset=lambda: demo_validation_dataset(bundle_dir))
    if isinstance(model, ModelFile):
        if not model.path:
            raise UserError('plan.json: model.kind is "file" but model.path is empty')
        if model.project:  # the model file's folder: `import mypackage.models` resolves there
            root = os.path.join(bundle_dir, model.project)
            if root not in sys.path:
                sys.path.insert(0, root)
        return load_model_file(os.path.join(bundle_dir, model.path))
    raise UserError(f'plan.json: a model of kind "{model.kind}" is not trained by this program '
                    f'(expected "{DEMO_KIND}" or "{FILE_KIND}")')


def make_loss(source: ModelSource) -> Any:
    """The user's make_loss() if given, else sparse categorical cross-entropy on logits."""
    if source.make_loss is None:
        return default_loss()
    return source.call("make_loss")
