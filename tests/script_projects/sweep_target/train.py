"""A training script without TensorFlow for sweeps: its validation loss is lowest at
--x 0.3 and falls with the steps; it prints Keras-like lines that dtgui reads
(`step N/M - loss: ... - val_loss: ...`). Arguments: --x X, --steps N, --seconds S;
the variable OFFSET is added to it."""

import argparse
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float, default=0.5)
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--seconds", type=float, default=0.2)
args = parser.parse_args()
offset = float(os.environ.get("OFFSET", "0"))
for step in range(1, args.steps + 1):
    time.sleep(args.seconds)
    val = (args.x - 0.3) ** 2 + offset + 1.0 / step
    print(f"step {step}/{args.steps} - loss: {2.0 / step:.4f} - val_loss: {val:.5f}",
          flush=True)
