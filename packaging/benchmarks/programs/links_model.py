"""A bandwidth-bound model for packaging/benchmark_links.py, as a dtgui model file: an MLP of
14.7 M parameters (59 MB of float32 gradients a step) on synthetic data, whose compute per
example is small beside the bytes its all-reduce moves. The labels are a fixed random
teacher's, so the loss falls and runs can be compared by it."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

FEATURES, WIDTH, DEPTH, CLASSES, EXAMPLES = 1024, 2048, 4, 10, 4096


def build_model() -> keras.Model:
    layers: list[keras.layers.Layer] = [keras.Input((FEATURES,))]
    layers += [keras.layers.Dense(WIDTH, activation="relu") for _ in range(DEPTH)]
    layers.append(keras.layers.Dense(CLASSES))
    return keras.Sequential(layers)


def make_dataset() -> tf.data.Dataset:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(EXAMPLES, FEATURES)).astype("float32")
    teacher = rng.normal(size=(FEATURES, CLASSES)).astype("float32")
    y = np.argmax(x @ teacher, axis=1).astype("int64")
    return tf.data.Dataset.from_tensor_slices((x, y))


def make_loss() -> keras.losses.Loss:
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
