"""What sending a run to MLflow costs its training, side by side in one run.

    .venv/bin/python packaging/benchmarks/benchmark_mlflow.py [--steps 2000] [--rounds 1]

The demo under Mirrored over 16 logical CPU replicas, launched and followed by this process
as the app follows a run, in interleaved rounds: MLflow off, then on (dtgui's embedded
SQLite store), then on, then off... Prints each run's training rate (steps/s after the
first --warmup steps, from the `timeline` of its `finished` event) and, timed inside the
runs that send, the CPU time the follower spent on MLflow (choosing the points on the
monitor thread; writing them on the writer's thread) over the training time. MLflow is
imported, and its store made, before the first round (once a process: said apart).
Target: logging adds under 1 %.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from dtgui.core.plans.plan import Plan  # noqa: E402
from dtgui.core.plans.strategies import Strategy  # noqa: E402
from dtgui.launch.start.pipeline import launch_plan  # noqa: E402
from dtgui.launch.trackers import mlflow_writer  # noqa: E402


def rate(bundle: Path, warmup: int) -> tuple[float, float]:
    """(steps/s after warmup, training seconds) from the main task's `finished` event."""
    events = next((bundle / "output").glob("events-*-0.jsonl"))
    finished = [e for e in map(json.loads, events.read_text().splitlines())
                if e.get("kind") == "finished"]
    timeline = finished[-1]["timeline"]
    start = next(mark for mark in timeline if mark[0] >= warmup)
    end = timeline[-1]
    return (end[0] - start[0]) / (end[1] - start[1]), float(end[1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dtgui-bench-mlflow-"))
    os.environ["DTGUI_DATA_DIR"] = str(root / "data")
    store = f"sqlite:///{root / 'mlflow.db'}"
    started = time.perf_counter()
    cpu = time.process_time()
    from mlflow.tracking import MlflowClient

    MlflowClient(store).search_experiments()
    print(f"MLflow imported and its store made: {time.perf_counter() - started:.1f} s "
          f"({time.process_time() - cpu:.1f} s CPU), once a process")
    plan = Plan(run_name="bench", strategy=Strategy.MIRRORED, replicas_per_task=16,
                steps=args.steps, steps_per_epoch=args.steps // 4, checkpoint_every=0)
    rates: dict[str, list[float]] = {"off": [], "on": []}
    shares: list[float] = []
    order = ["off", "on", "on", "off"] * args.rounds
    for i, kind in enumerate(order):
        os.environ["DTGUI_MLFLOW"] = store if kind == "on" else "off"
        controller = launch_plan(plan.with_changes(run_name=f"bench-{i}-{kind}"),
                                 root / "runs")
        assert controller.wait(3600), "the run did not end"
        assert mlflow_writer.drain_all(600, while_answering=False)
        steps_per_s, seconds = rate(controller.bundle.path, args.warmup)
        rates[kind].append(steps_per_s)
        line = f"{kind:>3}: {steps_per_s:8.1f} steps/s, {seconds:.1f} s training"
        tracker = controller.tracker
        if tracker is not None:
            spent = tracker.update_cpu_seconds
            writer = tracker.writer.cpu_seconds
            tracker.writer.cpu_seconds = 0.0  # the next run's own
            shares.append((spent + writer) / seconds)
            line += (f"; MLflow CPU {spent:.3f} s choosing + {writer:.3f} s writing = "
                     f"{100 * shares[-1]:.2f} % of the training time")
        print(line, flush=True)
    off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
    print(f"median: off {off:.1f} steps/s, on {on:.1f} steps/s, on/off {on / off:.3f}; "
          f"MLflow's CPU time {100 * statistics.median(shares):.2f} % of the training time "
          f"(max {100 * max(shares):.2f} %)")
    subprocess.run(["du", "-sh", str(root / "mlflow.db")], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
