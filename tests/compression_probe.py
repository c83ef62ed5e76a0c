"""Run as a program: one update of a linear model through dtgui's training call under
MultiWorkerMirrored (one worker), with gradients compressed as argv[1]; prints as JSON the
dtypes of every all-reduce the replicas ask for, the variables' dtype, the weights before and
after, and the gradient TensorFlow computes in float32 for that batch."""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.pop("TF_CONFIG", None)

import keras
import numpy as np
import tensorflow as tf

from dtgui.worker import loop
from dtgui.worker.distribute import build_strategy
from dtgui.worker.grad_compression import usable_compression
from dtgui.worker.plan import GradCompression, Plan
from dtgui.worker.strategies import Strategy


def spy_all_reduces() -> list[list[str]]:
    """Every all-reduce a replica asks of the strategy (one worker's group of one hands it
    no collective op to inspect): the dtypes of the values it is given, in call order."""
    seen: list[list[str]] = []
    original = tf.distribute.ReplicaContext.all_reduce

    def all_reduce(self: object, reduce_op: object, value: object, options: object = None) -> object:
        seen.append([str(v.dtype.name) for v in tf.nest.flatten(value)])
        return original(self, reduce_op, value, options=options)

    tf.distribute.ReplicaContext.all_reduce = all_reduce
    return seen


def main() -> None:
    compression = GradCompression(sys.argv[1])
    keras.utils.set_random_seed(0)
    all_reduces = spy_all_reduces()
    plan = Plan(strategy=Strategy.MULTI_WORKER_MIRRORED, replicas_per_task=1,
                grad_compression=compression, bytes_per_pack=1 << 20)
    info = build_strategy(plan, "worker:0")
    rng = np.random.default_rng(3)
    x = rng.normal(size=(8, 5)).astype("float32")
    y = rng.normal(size=(8, 1)).astype("float32")
    with info.strategy.scope():
        model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(learning_rate=1.0)
        loss_obj = keras.losses.MeanSquaredError(reduction="none")
    applied, fallback = usable_compression(plan, optimizer)
    before = [w.numpy() for w in model.trainable_variables]
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(loss_obj(y, model(x)))
    grads = [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]
    trainer = loop.make_trainer(info, model, optimizer, loss_obj, 8, xla=False, float16=False,
                                compression=applied, bytes_per_pack=plan.bytes_per_pack)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()
    iterator = iter(info.strategy.experimental_distribute_dataset(data))
    args = (iterator, tf.constant(1), loop.wishes(1.0, False), loop.stop_pair(0.0, 0.0),
            tf.constant(0))
    trainer.run(*args)
    print(json.dumps({
        "applied": str(applied), "fallback": fallback,
        "all_reduces": all_reduces,
        "variables": sorted({str(v.dtype) for v in model.trainable_variables}),
        "before": [w.tolist() for w in before], "grads": [g.tolist() for g in grads],
        "after": [w.numpy().tolist() for w in model.trainable_variables]}))


if __name__ == "__main__":
    main()
