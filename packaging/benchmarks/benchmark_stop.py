"""What agreeing on a stop costs per device call under MultiWorkerMirrored, side by side.

    .venv/bin/python packaging/benchmarks/benchmark_stop.py [--calls 300] [--rounds 3]

Two worker processes on this machine (CPU) train a small MLP one step per call, in
interleaved rounds of three ways of learning that a stop was asked:

- dtgui's: the stop flag rides in the all-reduce each call already makes (the per-call
  losses and the next call's size, dtgui.worker.loop): no collective of its own;
- a collective of its own after each call, reducing the flag;
- TensorFlow's tf.distribute.experimental.PreemptionCheckpointHandler, each call wrapped in
  its `run`.

Prints the median seconds per call of each and the ratios to dtgui's.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def worker(calls: int, rounds: int, out_dir: str) -> dict[str, list[float]]:
    import keras
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, "relu"),
                                  keras.layers.Dense(10)])
        optimizer = keras.optimizers.SGD(0.01)
        optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    features = tf.random.stateless_normal((1024, 64), (1, 2))
    labels = tf.random.stateless_uniform((1024,), (3, 4), maxval=10, dtype=tf.int32)
    ds = tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(64)
    iterator = iter(strategy.experimental_distribute_dataset(ds))

    def step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)),
                                              global_batch_size=64)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def call(it: Any, flag: Any) -> Any:
        losses = strategy.run(step, args=next(it))
        # as dtgui's call: one all-reduce of the losses and [proposal, stop flag]
        row = strategy.run(lambda v: tf.stack([v, 1.0, flag]), args=(losses,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, row, axis=None)

    @tf.function
    def flag_only(flag: Any) -> Any:
        return strategy.reduce(tf.distribute.ReduceOp.SUM,
                               strategy.run(lambda: tf.identity(flag)), axis=None)

    checkpoint = tf.train.Checkpoint(model=model)
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, checkpoint, out_dir)
    zero = tf.constant(0.0)

    def dtgui_way() -> None:
        call(iterator, zero).numpy()

    def own_collective() -> None:
        call(iterator, zero).numpy()
        flag_only(zero).numpy()

    def tf_handler() -> None:
        handler.run(call, iterator, zero).numpy()

    ways = {"dtgui": dtgui_way, "own collective": own_collective,
            "PreemptionCheckpointHandler": tf_handler}
    for run in ways.values():  # trace and warm up
        for _ in range(20):
            run()
    found: dict[str, list[float]] = {name: [] for name in ways}
    for r in range(rounds):
        order = list(ways)[r % 3:] + list(ways)[:r % 3]
        for name in order:
            began = time.perf_counter()
            for _ in range(calls):
                ways[name]()
            found[name].append((time.perf_counter() - began) / calls)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker >= 0:
        found = worker(args.calls, args.rounds, args.out)
        if args.worker == 0:
            print("RESULT " + json.dumps(found), flush=True)
        sys.stdout.flush()
        os._exit(0)  # TensorFlow's teardown is not what is measured
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(2):
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2",
                   "TF_CONFIG": json.dumps({"cluster": cluster,
                                            "task": {"type": "worker", "index": i}})}
            procs.append(subprocess.Popen(
                [sys.executable, __file__, "--worker", str(i), "--calls", str(args.calls),
                 "--rounds", str(args.rounds), "--out", os.path.join(tmp, f"w{i}")],
                env=env, stdout=subprocess.PIPE, text=True))
        outputs = [p.communicate()[0] for p in procs]
    line = next((x for x in outputs[0].splitlines() if x.startswith("RESULT ")), "")
    if not line:
        print("worker 0 gave no result", file=sys.stderr)
        return 1
    found = json.loads(line[len("RESULT "):])
    base = statistics.median(found["dtgui"])
    for name, seconds in found.items():
        median = statistics.median(seconds)
        print(f"{name:30s} {median * 1e3:8.3f} ms/call  x{median / base:.3f}  "
              f"(rounds: {', '.join(f'{s * 1e3:.3f}' for s in seconds)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
