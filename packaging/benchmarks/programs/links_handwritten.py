"""The hand-written reference of packaging/benchmark_links.py: MultiWorkerMirrored over
TF_CONFIG, the links model file (programs/links_model.py), K steps per tf.function call in a
graph loop (as Keras' steps_per_execution, the best a hand-written loop does), Adam, the
loss all-reduced once per call, deterministic ops and the seed as dtgui's plan. Prints one
JSON line: steps/s after --warmup steps and the final loss (the mean of the last call's)."""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import tensorflow as tf
from links_model import build_model, make_dataset, make_loss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--per-call", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.001)
    args = parser.parse_args()
    keras.utils.set_random_seed(42)
    tf.config.experimental.enable_op_determinism()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = args.batch * strategy.num_replicas_in_sync
    with strategy.scope():
        net = build_model()
        optimizer = keras.optimizers.Adam(learning_rate=args.lr)
        optimizer.build(net.trainable_variables)
    loss_fn = make_loss()
    data = make_dataset().shuffle(4096, seed=42).repeat().batch(global_batch, drop_remainder=True)
    iterator = iter(strategy.experimental_distribute_dataset(data.prefetch(tf.data.AUTOTUNE)))

    def replica_step(batch: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        features, labels = batch
        with tf.GradientTape() as tape:
            per_example = loss_fn(labels, net(features, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, net.trainable_variables)
        optimizer.apply_gradients(zip(grads, net.trainable_variables, strict=True))
        return loss

    @tf.function
    def train_steps(iterator: object, k: tf.Tensor) -> tf.Tensor:
        # the replica's losses summed over the call, all-reduced once after it: a second
        # collective in the loop's body costs a round trip a step, and under heavy load
        # four workers have hung in it
        total = tf.constant(0.0)
        for _ in tf.range(k):
            total += strategy.run(replica_step, args=(next(iterator),))
        summed = strategy.reduce(
            tf.distribute.ReduceOp.SUM,
            strategy.experimental_distribute_values_from_function(lambda _: total), axis=None)
        return summed / tf.cast(k, tf.float32)

    k = tf.constant(args.per_call)
    done, began, loss, t0 = 0, 0.0, 0.0, 0.0
    while done < args.steps:
        loss = float(train_steps(iterator, k))
        done += args.per_call
        if done == args.warmup:
            began, t0 = time.perf_counter(), time.time()
    rate = (args.steps - args.warmup) / (time.perf_counter() - began)
    # t0, t1: the measured window on the wall clock (the benchmark reads CPU time over it)
    print(json.dumps({"steps_per_s": rate, "final_loss": loss, "t0": t0, "t1": time.time()}),
          flush=True)


if __name__ == "__main__":
    main()
