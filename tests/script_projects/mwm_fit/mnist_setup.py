"""Data and model, as in TensorFlow's multi-worker Keras tutorial (in-memory data: no download)."""

import numpy as np
import tensorflow as tf


def mnist_dataset(batch_size):
    rng = np.random.default_rng(0)
    x_train = rng.random((512, 28, 28), dtype=np.float32)
    y_train = (x_train.mean(axis=(1, 2)) * 20).astype(np.int64) % 10
    train_dataset = tf.data.Dataset.from_tensor_slices(
        (x_train, y_train)).shuffle(512, seed=1).repeat().batch(batch_size)
    return train_dataset


def build_and_compile_cnn_model():
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(28, 28)),
        tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(4, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.SGD(learning_rate=0.01),
        metrics=["accuracy"])
    return model
