"""model.fit under MultiWorkerMirroredStrategy, as TensorFlow's multi-worker Keras tutorial
writes it, with TensorBoard and BackupAndRestore callbacks."""

import json
import os
import sys

import tensorflow as tf

import mnist_setup

per_worker_batch_size = 16
tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])
epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
steps_per_epoch = int(sys.argv[2]) if len(sys.argv) > 2 else 5

strategy = tf.distribute.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_setup.mnist_dataset(global_batch_size)

with strategy.scope():
    multi_worker_model = mnist_setup.build_and_compile_cnn_model()

log_dir = os.environ.get("DTGUI_TENSORBOARD_DIR", "/tmp/tb")
backup_dir = os.path.join(os.environ.get("DTGUI_CHECKPOINT_DIR", "/tmp"), "backup")
callbacks = [
    tf.keras.callbacks.TensorBoard(log_dir=log_dir, update_freq=1),
    tf.keras.callbacks.BackupAndRestore(backup_dir=backup_dir),
]
multi_worker_model.fit(multi_worker_dataset, epochs=epochs, steps_per_epoch=steps_per_epoch,
                       callbacks=callbacks, verbose=2)
print("trained", tf.keras.__name__ if hasattr(tf.keras, "__name__") else "keras")
