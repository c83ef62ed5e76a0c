"""Rerun an exported sweep without dtgui: each trial's bundle, K at a time (docs/sweeps.md).

    python3 rerun.py [--parallel K] [--only 0,3] [--python PATH] [--gpus 0,1,2,3]

This file is copied as it is into the exported folder (`dtgui.core.sweeps.sweep_export`), beside
`sweep-trials.json`: each trial's number, values and bundle folder, the objective and its
direction. Each trial runs as its bundle's README says (`bash BUNDLE/run.sh`, PYTHON choosing
the interpreter; with --gpus each running trial is given its own of those GPUs,
CUDA_VISIBLE_DEVICES); as each ends it is printed with its objective, read from its events (the
best validation loss or metric, the final training loss, or a scalar the script reported);
at the end the trials best first, also written to `rerun.csv`. The standard library only:
it runs where dtgui is not installed. Exit code 0 when every trial ran to its end.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TRIALS_FILE = "sweep-trials.json"
RESULTS_FILE = "rerun.csv"


def event_value(event: dict[str, Any], objective: str) -> float | None:
    """The objective's value in one event, if it holds it."""
    kind = event.get("kind")
    value: Any = None
    if kind == "validation" and objective == "val_loss":
        value = event.get("loss")
    elif kind == "validation" and objective.startswith("val_"):
        value = (event.get("metrics") or {}).get(objective[4:])
    elif kind == "finished" and objective == "loss":
        value = event.get("loss")
    elif kind == "scalar" and str(event.get("tag", "")).split("/")[-1] == objective:
        value = event.get("value")
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def objective_of(bundle: Path, objective: str, goal: str) -> float | None:
    """The trial's objective: its best value (the final training loss for `loss`)."""
    values = []
    for path in sorted((bundle / "output").glob("events-*.jsonl")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            value = event_value(event, objective) if isinstance(event, dict) else None
            if value is not None:
                values.append(value)
    if not values:
        return None
    if objective == "loss":
        return values[-1]
    return min(values) if goal == "minimize" else max(values)


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent
    sweep = json.loads((here / TRIALS_FILE).read_text(encoding="utf-8"))
    parser = argparse.ArgumentParser(description=f"Rerun the trials of sweep {sweep['name']}.")
    parser.add_argument("--parallel", type=int, default=int(sweep.get("parallel", 1)),
                        help="trials at once (default: the sweep's)")
    parser.add_argument("--only", default="", help="comma-separated trial numbers")
    parser.add_argument("--python", default=os.environ.get("PYTHON", "python3"),
                        help="the interpreter each task runs with (default $PYTHON or python3)")
    parser.add_argument("--gpus", default="",
                        help="comma-separated GPU numbers to share out: each trial takes "
                        f"{sweep.get('gpus_per_trial') or 1} of them while it runs")
    args = parser.parse_args(argv)
    per_trial = int(sweep.get("gpus_per_trial") or 1)
    free_gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]
    if free_gpus and len(free_gpus) < per_trial:
        parser.error(f"a trial takes {per_trial} GPU(s); --gpus names {len(free_gpus)}")
    trials = sweep["trials"]
    if args.only:
        wanted = {int(n) for n in args.only.split(",") if n.strip()}
        unknown = wanted - {t["number"] for t in trials}
        if unknown:
            parser.error(f"no trial {', '.join(map(str, sorted(unknown)))} in this sweep")
        trials = [t for t in trials if t["number"] in wanted]
    objective, goal = sweep["objective"], sweep["direction"]
    env = {**os.environ, "PYTHON": args.python}
    waiting = list(trials)
    running: dict[subprocess.Popen[bytes], tuple[dict[str, Any], float, list[str]]] = {}
    results: list[dict[str, Any]] = []
    print(f"sweep {sweep['name']}: {len(trials)} trial(s), {max(1, args.parallel)} at a time; "
          f"{goal} {objective}", flush=True)
    while waiting or running:
        while waiting and len(running) < max(1, args.parallel) and (
                not args.gpus or len(free_gpus) >= per_trial):
            trial = waiting.pop(0)
            bundle = here / trial["bundle"]
            gpus = [free_gpus.pop(0) for _ in range(per_trial)] if args.gpus else []
            trial_env = {**env, "CUDA_VISIBLE_DEVICES": ",".join(gpus)} if gpus else env
            log = (bundle / "rerun.log").open("wb")
            proc = subprocess.Popen(["bash", str(bundle / "run.sh")], cwd=bundle,
                                    env=trial_env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT)
            log.close()
            running[proc] = (trial, time.monotonic(), gpus)
        time.sleep(0.2)
        for proc, (trial, began, gpus) in list(running.items()):
            if proc.poll() is None:
                continue
            del running[proc]
            free_gpus += gpus
            value = objective_of(here / trial["bundle"], objective, goal)
            row = {"number": trial["number"], "exit": proc.returncode, objective: value,
                   "seconds": round(time.monotonic() - began, 1), **trial["params"],
                   "bundle": trial["bundle"]}
            results.append(row)
            values = " ".join(f"{k}={v}" for k, v in trial["params"].items())
            print(f"trial {trial['number']}: {values}: "
                  + (f"{objective} {value:.6g}" if value is not None else f"no {objective}")
                  + ("" if proc.returncode == 0 else f" (exit code {proc.returncode}; see "
                     f"{trial['bundle']}/rerun.log)"), flush=True)
    sign = 1.0 if goal == "minimize" else -1.0
    results.sort(key=lambda r: (r[objective] is None, sign * (r[objective] or 0.0)))
    if results:
        with (here / RESULTS_FILE).open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(results[0]))
            writer.writeheader()
            writer.writerows(results)
        print(f"results, best first: {here / RESULTS_FILE}")
    return 0 if all(r["exit"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
