"""What the reference programs share with dtgui's demo: data, model, strategy, seeds.

The data pipeline is the one dtgui's training program builds for the demo (seeded shuffle of
the whole set, repeat, batch with drop_remainder, prefetch, sharded by data), so the programs
differ only in how they drive the steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", required=True,
                        choices=("one_device", "mirrored", "multi_worker_mirrored"))
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--batch", type=int, default=32, help="per replica")
    parser.add_argument("--replicas", type=int, default=2, help="mirrored: logical CPUs")
    parser.add_argument("--data", required=True, help="digits.npz")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--lr", type=float, default=0.001)
    return parser.parse_args()


def setup(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(tf, keras, strategy) with seeds and op determinism set, devices configured."""
    import tensorflow as tf

    if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
        keras = tf.keras  # tf_keras
    else:
        import keras

    if args.strategy == "mirrored":
        cpus = tf.config.list_physical_devices("CPU")
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(args.replicas)])
    keras.utils.set_random_seed(args.seed)
    tf.config.experimental.enable_op_determinism()
    if args.strategy == "one_device":
        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    elif args.strategy == "mirrored":
        strategy = tf.distribute.MirroredStrategy(
            devices=[f"/cpu:{i}" for i in range(args.replicas)],
            cross_device_ops=tf.distribute.ReductionToOneDevice())
    else:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    return tf, keras, strategy


def dataset(tf: Any, args: Any, global_batch: int) -> Any:
    import numpy as np

    with np.load(args.data) as npz:
        images, labels = npz["images"], npz["labels"]
    features = (images.reshape(len(images), -1).astype(np.float32) / 16.0).clip(0.0, 1.0)
    ds = tf.data.Dataset.from_tensor_slices((features, labels.astype(np.int32)))
    ds = ds.shuffle(len(features), seed=args.seed, reshuffle_each_iteration=True).repeat()
    ds = ds.batch(global_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    options.deterministic = True
    return ds.with_options(options)


def model(keras: Any) -> Any:
    return keras.Sequential([
        keras.Input(shape=(64,)),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10, dtype="float32"),
    ])


def report(steps_per_second: float) -> None:
    print(json.dumps({"steps_per_second": steps_per_second}), flush=True)
    sys.stdout.flush()
