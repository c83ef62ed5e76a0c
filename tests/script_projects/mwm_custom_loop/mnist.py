"""Data and model, as in TensorFlow's multi-worker custom-training-loop tutorial (in-memory
data: no download)."""

import numpy as np
import tensorflow as tf


def mnist_dataset():
    rng = np.random.default_rng(0)
    x_train = rng.random((512, 28, 28), dtype=np.float32)
    y_train = (x_train.mean(axis=(1, 2)) * 20).astype(np.int64) % 10
    return tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(512, seed=1)


def dataset_fn(global_batch_size, input_context):
    batch_size = input_context.get_per_replica_batch_size(global_batch_size)
    dataset = mnist_dataset()
    dataset = dataset.shard(input_context.num_input_pipelines,
                            input_context.input_pipeline_id)
    dataset = dataset.repeat().batch(batch_size)
    return dataset


def build_cnn_model():
    return tf.keras.Sequential([
        tf.keras.Input(shape=(28, 28)),
        tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(4, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
