"""A custom training loop under MirroredStrategy that reports each replica's loss to dtgui."""

import os

import numpy as np
import tensorflow as tf

from dtgui_worker import report

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * int(os.environ.get("DTGUI_REPLICAS_PER_TASK", "2")))
strategy = tf.distribute.MirroredStrategy()
steps = int(os.environ.get("DTGUI_STEPS", "6"))
global_batch = int(os.environ.get("DTGUI_GLOBAL_BATCH", "16"))

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 4)).astype("float32")
y = (x @ np.array([1.0, -2.0, 0.5, 3.0], dtype="float32"))[:, None]
dataset = strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(global_batch))

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.05)


@tf.function
def train_step(inputs):
    def step_fn(batch):
        features, labels = batch
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(model(features) - labels), axis=1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return tf.reduce_mean(per_example)
    return strategy.run(step_fn, args=(inputs,))


iterator = iter(dataset)
for step in range(1, steps + 1):
    per_replica = train_step(next(iterator))
    losses = [float(v) for v in strategy.experimental_local_results(per_replica)]
    report(step, replica_losses=losses, lr=0.05)
print("done")
