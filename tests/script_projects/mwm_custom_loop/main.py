"""A custom training loop under MultiWorkerMirroredStrategy, as TensorFlow's multi-worker
custom-training-loop tutorial writes it: it reports nothing to dtgui and writes no TensorBoard
files; it only prints one line per epoch. It calls `reset_states` (a Keras 2 name)."""

import json
import os
import sys

import tensorflow as tf

import mnist

tf_config = json.loads(os.environ["TF_CONFIG"])
per_worker_batch_size = 16
num_workers = len(tf_config["cluster"]["worker"])
global_batch_size = per_worker_batch_size * num_workers
num_epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
num_steps_per_epoch = int(sys.argv[2]) if len(sys.argv) > 2 else 7

strategy = tf.distribute.MultiWorkerMirroredStrategy()

with strategy.scope():
    multi_worker_dataset = strategy.distribute_datasets_from_function(
        lambda input_context: mnist.dataset_fn(global_batch_size, input_context))
    multi_worker_model = mnist.build_cnn_model()
    optimizer = tf.keras.optimizers.RMSprop(learning_rate=0.001)
    train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")


@tf.function
def train_step(iterator):
    """Training step function."""

    def step_fn(inputs):
        """Per-Replica step function."""
        x, y = inputs
        with tf.GradientTape() as tape:
            predictions = multi_worker_model(x, training=True)
            per_batch_loss = tf.keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, reduction=tf.keras.losses.Reduction.NONE)(y, predictions)
            loss = tf.nn.compute_average_loss(per_batch_loss,
                                              global_batch_size=global_batch_size)
        grads = tape.gradient(loss, multi_worker_model.trainable_variables)
        optimizer.apply_gradients(zip(grads, multi_worker_model.trainable_variables))
        train_accuracy.update_state(y, predictions)
        return loss

    per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


epoch = 0
iterator = iter(multi_worker_dataset)
while epoch < num_epochs:
    total_loss = 0.0
    num_batches = 0
    for _ in range(num_steps_per_epoch):
        total_loss += train_step(iterator)
        num_batches += 1
    train_loss = total_loss / num_batches
    print("Epoch: %d, accuracy: %f, train_loss: %f." % (epoch, train_accuracy.result(),
                                                        train_loss))
    train_accuracy.reset_states()
    epoch += 1
