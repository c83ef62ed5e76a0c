"""Does compressing the gradients for the all-reduce change what is learned? 2,000 steps of
the demo (Mirrored over 2 logical CPUs, batch 32 a replica, Adam, deterministic ops) with
seeds 1, 2, 3 uncompressed, then with gradients compressed to float16 and to bfloat16 for
the all-reduce. Losses are averaged over windows of 100 steps; at every window, what
compression changes (a compressed run's curve less its seed's uncompressed one) must stay
within the spread of the uncompressed runs (highest less lowest of the seeds): compression
moves the curve less than another seed does.

    .venv/bin/python packaging/benchmarks/benchmark_compression_learning.py [--steps 2000]

Prints each window's spread and how far each compressed run is from its own seed's
uncompressed curve, then PASS or FAIL.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from worker_helpers import make_bundle, make_plan, run_task, step_means

SEEDS = (1, 2, 3)
WINDOW = 100


def curve(root: Path, name: str, steps: int, seed: int, compression: str) -> np.ndarray:
    plan = make_plan(strategy="mirrored", replicas_per_task=2, per_replica_batch=32,
                     steps=steps, steps_per_epoch=steps, seed=seed, learning_rate=0.001,
                     grad_compression=compression)
    bundle = make_bundle(root / name, plan)
    code, events = run_task(bundle, timeout=1800)
    if code != 0:
        raise RuntimeError(f"{name} failed ({code})")
    means = step_means(events)
    losses = np.array([means[s] for s in sorted(means)], dtype=np.float64)
    windows: np.ndarray = losses[: len(losses) // WINDOW * WINDOW].reshape(-1, WINDOW)
    return np.asarray(windows.mean(axis=1), dtype=np.float64)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dtgui-compression-") as tmp:
        root = Path(tmp)
        plain = {s: curve(root, f"f32-{s}", args.steps, s, "none") for s in SEEDS}
        low = np.min(list(plain.values()), axis=0)
        high = np.max(list(plain.values()), axis=0)
        ok = True
        for compression in ("float16", "bfloat16"):
            for s in SEEDS:
                got = curve(root, f"{compression}-{s}", args.steps, s, compression)
                moved = np.abs(got - plain[s])
                outside = int(np.sum(moved > high - low))
                ok &= outside == 0
                print(f"{compression} seed {s}: windows moved beyond the seeds' spread "
                      f"{outside}/{len(got)}; largest move {moved.max():.4f} (the spread "
                      f"there {(high - low)[moved.argmax()]:.4f}); final window "
                      f"{got[-1]:.4f} (float32 seed {s}: {plain[s][-1]:.4f})")
        spread = high - low
        print(f"seeds' spread a window (float32): {spread.min():.4f} to {spread.max():.4f}; "
              f"final window {low[-1]:.4f} to {high[-1]:.4f}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
