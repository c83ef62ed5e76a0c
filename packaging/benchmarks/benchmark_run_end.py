"""How promptly a run ends: seconds from its last training step to its process's exit, by
replicas and steps, side by side in one run.

    .venv/bin/python packaging/benchmarks/benchmark_run_end.py [--replicas 2,8,16] [--steps 50,3000]
        [--rounds 1] [--baseline REV]

For each (replicas, steps) it exports the demo under MirroredStrategy on logical CPU devices
(batch 32 per replica, validation half-way and at the end, no checkpoints) and runs the
bundle's `bash run.sh` as a user would. From the run's events and the moment run.sh returns
it prints, in seconds:

- results: the last `steps` event -> `model_saved` (the last validation, the model written);
- end: `model_saved` -> the process's exit (nothing of it is a result);
- total: the last step -> the exit.

With --baseline REV each bundle also runs with the worker package of git revision REV (the
bundle's dtgui_worker replaced by that revision's dtgui/worker), every round in another
order, so that both see the same load. Prints the medians over the rounds.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "screenshots"))  # shots.py
from shots import base_env

REPO = Path(__file__).resolve().parents[2]
WORKER = "dtgui_worker"


def export_bundle(root: Path, replicas: int, steps: int) -> Path:
    out = root / f"bundle-{replicas}x{steps}"
    half = max(1, steps // 2)
    args = [sys.executable, "-m", "dtgui", "export", str(out), "--strategy", "mirrored",
            "--replicas", str(replicas), "--steps", str(steps), "--steps-per-epoch", str(half),
            "--validate-every", str(half), "--batch-size", "32", "--checkpoint-every", "0",
            "--seed", "42"]
    subprocess.run(args, check=True, cwd=REPO, capture_output=True,
                   env={**base_env(), "PYTHONPATH": str(REPO)})
    return out


def with_worker_of(bundle: Path, revision: str) -> Path:
    """A copy of `bundle` running the worker package of git `revision`."""
    copy = bundle.with_name(f"{bundle.name}-{revision.replace('/', '_')}")
    shutil.copytree(bundle, copy)
    shutil.rmtree(copy / WORKER)
    archive = subprocess.run(["git", "archive", revision, "dtgui/worker"], cwd=REPO,
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(copy / "rev", filter="data")
    (copy / "rev" / "dtgui" / "worker").rename(copy / WORKER)
    shutil.rmtree(copy / "rev")
    return copy


def run_once(bundle: Path) -> tuple[float, float, float]:
    """(last step -> model saved, model saved -> exit, last step -> exit) of one run."""
    shutil.rmtree(bundle / "output", ignore_errors=True)
    proc = subprocess.run(["bash", "run.sh"], cwd=bundle, env=base_env(), capture_output=True,
                          text=True, timeout=3600)
    exited = time.time()
    events = [json.loads(line) for line in
              (bundle / "output" / "events-worker-0.jsonl").read_text().splitlines()]
    saved = [e["t"] for e in events if e.get("kind") == "model_saved"]
    steps = [e["t"] for e in events if e.get("kind") == "steps"]
    if proc.returncode != 0 or not saved or not steps:
        raise RuntimeError(f"the run failed ({proc.returncode}): {proc.stdout[-2000:]}")
    last = max(steps)
    return saved[-1] - last, exited - saved[-1], exited - last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", default="2,8,16")
    parser.add_argument("--steps", default="50,3000")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline", default="",
                        help="also run each bundle with the worker of this git revision")
    args = parser.parse_args()
    cases = [(int(r), int(s)) for s in args.steps.split(",") for r in args.replicas.split(",")]
    kinds = ["this tree", *([f"worker of {args.baseline}"] if args.baseline else [])]
    times: dict[tuple[str, int, int], list[tuple[float, float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="dtgui-run-end-") as tmp:
        bundles = {}
        for replicas, steps in cases:
            bundle = export_bundle(Path(tmp), replicas, steps)
            bundles[("this tree", replicas, steps)] = bundle
            if args.baseline:
                bundles[(kinds[1], replicas, steps)] = with_worker_of(bundle, args.baseline)
        for rnd in range(args.rounds):
            for replicas, steps in cases:
                order = kinds[rnd % len(kinds):] + kinds[:rnd % len(kinds)]
                for kind in order:
                    got = run_once(bundles[(kind, replicas, steps)])
                    times.setdefault((kind, replicas, steps), []).append(got)
                    print(f"  round {rnd + 1}: {kind}, {replicas} replicas, {steps} steps: "
                          f"results {got[0]:.2f} s, end {got[1]:.2f} s, total {got[2]:.2f} s",
                          flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; medians of "
          f"{args.rounds} round(s), seconds")
    print(f"{'worker':<24} {'replicas':>8} {'steps':>6} {'last step->saved':>17} "
          f"{'saved->exit':>12} {'last step->exit':>16}")
    for replicas, steps in cases:
        for kind in kinds:
            rows = times[(kind, replicas, steps)]
            med = [statistics.median(r[i] for r in rows) for i in range(3)]
            print(f"{kind:<24} {replicas:>8} {steps:>6} {med[0]:>17.2f} {med[1]:>12.2f} "
                  f"{med[2]:>16.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
