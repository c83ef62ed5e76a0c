"""ParameterServer training as TensorFlow's tutorial writes it: workers and parameter servers
run a server and wait; the coordinator (chief) schedules steps with a ClusterCoordinator."""

import json
import os

import tensorflow as tf

config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()

if task["type"] in ("worker", "ps"):
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=task["type"],
                                  task_index=task["index"], protocol="grpc", start=True)
    server.join()

strategy = tf.distribute.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    weight = tf.Variable(5.0)
    optimizer = tf.keras.optimizers.SGD(0.1)


def dataset_fn():
    return tf.data.Dataset.from_tensors(1.0).repeat()


per_worker = coordinator.create_per_worker_dataset(dataset_fn)
iterator = iter(per_worker)


@tf.function
def step(it):
    def replica(x):
        with tf.GradientTape() as tape:
            loss = tf.square(weight * x)
        optimizer.apply_gradients([(tape.gradient(loss, weight), weight)])
        return loss
    return strategy.run(replica, args=(next(it),))


writer = tf.summary.create_file_writer(os.environ["DTGUI_TENSORBOARD_DIR"])
steps = int(os.environ.get("DTGUI_STEPS", "10"))
for i in range(1, steps + 1):
    loss = coordinator.schedule(step, args=(iterator,))
    coordinator.join()
    with writer.as_default():
        tf.summary.scalar("loss", loss.fetch(), step=i)
writer.close()
print("coordinator done")
