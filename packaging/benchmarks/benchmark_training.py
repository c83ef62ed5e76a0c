"""How fast dtgui trains, side by side with hand-written TensorFlow, in one run.

    .venv/bin/python packaging/benchmarks/benchmark_training.py [--steps 3000] [--rounds 3]

For OneDevice, Mirrored over 2 logical CPUs, MultiWorkerMirrored with 2 worker processes and
ParameterServer with 2 workers and 1 parameter server (no reference programs for it),
on the demo (the MLP on the bundled digits, batch 32 per replica, deterministic ops, seed 42),
it runs, in interleaved rounds (each round in another order, so that all see the same load):

- dtgui: the exported bundle, `bash run.sh`, as a user would run it;
- dtgui with its live events off (DTGUI_LIVE_EVENTS=0): what monitoring costs, side by side;
  and, less sensitive to the machine's load, the time each dtgui run spends writing its live
  events and loss summaries (`reporting_seconds` of its `finished` event) over its training
  time;
- dtgui without the split of its step time (DTGUI_STEP_SPLIT=0), side by side; and what the
  split's calibrations took, timed inside each dtgui run (its last `split` event): making the
  calibration runs once, each calibration, and all of it as a share of the training time (the
  figure the dashboard shows, at most dtgui.worker.step_timing.SPLIT_BUDGET; a run too short
  for that is not measured);
- a hand-written tf.distribute custom loop (packaging/benchmarks/programs/handwritten_loop.py);
- Keras `model.fit` under the same strategy (tf_keras for MultiWorkerMirrored).

Each program's rate is steps per second after the first --warmup steps (tracing, start-up);
dtgui's comes from the `timeline` of its `finished` event. Prints the medians and the ratios.
Targets: dtgui >= 0.98 of the hand-written loop; monitoring <= 1 %.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "screenshots"))  # shots.py
from shots import base_env

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from dtgui.resources import DEMO_DATA  # noqa: E402
from dtgui.worker.machine_probe import choose_free_ports as free_ports  # noqa: E402

PROGRAMS = Path(__file__).resolve().parent / "programs"
STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "parameter_server")
KINDS = ("dtgui", "dtgui-no-events", "dtgui-no-split", "hand-written", "model.fit")
REPORTING: list[float] = []  # per dtgui run: time writing live events / training time
# per dtgui run: (making the calibration runs, one calibration, its share at the interval), seconds
CALIBRATION: list[tuple[float, float, float]] = []


def export_bundle(root: Path, strategy: str, steps: int) -> Path:
    out = root / f"bundle-{strategy}"
    args = [sys.executable, "-m", "dtgui", "export", str(out), "--strategy", strategy,
            "--steps", str(steps), "--steps-per-epoch", str(steps), "--batch-size", "32",
            "--checkpoint-every", "0", "--seed", "42"]
    if strategy == "mirrored":
        args += ["--replicas", "2"]
    if strategy == "multi_worker_mirrored":
        args += ["--workers", "2"]
    if strategy == "parameter_server":
        args += ["--workers", "2", "--ps", "1"]
    subprocess.run(args, check=True, cwd=REPO, capture_output=True, env={
        **base_env(), "PYTHONPATH": str(REPO)})
    return out


def run_dtgui(bundle: Path, warmup: int, live: bool, split: bool = True) -> float:
    shutil.rmtree(bundle / "output", ignore_errors=True)
    env = {**base_env(), "DTGUI_LIVE_EVENTS": "1" if live else "0",
           "DTGUI_STEP_SPLIT": "1" if split else "0"}
    proc = subprocess.run(["bash", "run.sh"], cwd=bundle, env=env, capture_output=True,
                          text=True, timeout=900)
    main = "chief-0" if (bundle / "tasks" / "chief-0.sh").exists() else "worker-0"
    events = bundle / "output" / f"events-{main}.jsonl"
    read = [json.loads(line) for line in events.read_text().splitlines()]
    finished = [e for e in read if e.get("kind") == "finished"]
    # ParameterServer: the coordinator reports its workers' splits; the first one's counts
    splits = [e for e in read if e.get("kind") == "split"
              and e.get("of_task", "worker:0") == "worker:0"]
    if proc.returncode != 0 or not finished:
        raise RuntimeError(f"dtgui run failed ({proc.returncode}): {proc.stdout[-2000:]}")
    timeline = finished[-1]["timeline"]
    start = next(mark for mark in timeline if mark[0] >= warmup)
    end = timeline[-1]
    if live:  # what the live events cost, timed inside the same run
        REPORTING.append(finished[-1].get("reporting_seconds", 0.0) / timeline[-1][1])
    if live and splits and splits[-1].get("calibrations"):
        last = splits[-1]
        each = (last["calibration_seconds"] - last["setup_seconds"]) / last["calibrations"]
        CALIBRATION.append((last["setup_seconds"], each,
                            last["calibration_seconds"] / last["training_seconds"]))
    return (end[0] - start[0]) / (end[1] - start[1])


def run_reference(program: str, strategy: str, steps: int, warmup: int) -> float:
    args = [sys.executable, str(PROGRAMS / program), "--strategy", strategy, "--steps",
            str(steps), "--warmup", str(warmup), "--data", str(DEMO_DATA)]
    env = base_env()
    if program == "keras_fit.py" and strategy == "multi_worker_mirrored":
        env["TF_USE_LEGACY_KERAS"] = "1"
    workers = 2 if strategy == "multi_worker_mirrored" else 1
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(workers)]}
    procs = []
    for index in range(workers):
        task_env = dict(env)
        if workers > 1:
            task_env["TF_CONFIG"] = json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": index}})
        procs.append(subprocess.Popen(args, cwd=PROGRAMS, env=task_env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    outputs = [p.communicate(timeout=900) for p in procs]
    for proc, (_out, err) in zip(procs, outputs, strict=True):
        if proc.returncode != 0:
            raise RuntimeError(f"{program} failed: {err[-2000:]}")
    return float(json.loads(outputs[0][0].strip().splitlines()[-1])["steps_per_second"])


def measure(kind: str, strategy: str, bundle: Path, steps: int, warmup: int) -> float | None:
    try:
        if kind == "dtgui":
            return run_dtgui(bundle, warmup, live=True)
        if kind == "dtgui-no-events":
            return run_dtgui(bundle, warmup, live=False)
        if kind == "dtgui-no-split":
            return run_dtgui(bundle, warmup, live=True, split=False)
        if kind == "hand-written":
            return run_reference("handwritten_loop.py", strategy, steps, warmup)
        return run_reference("keras_fit.py", strategy, steps, warmup)
    except (RuntimeError, subprocess.SubprocessError, OSError, ValueError, KeyError) as exc:
        print(f"  {kind} / {strategy}: {str(exc).strip().splitlines()[-1]}", flush=True)
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="which programs, comma-separated (default: all of them)")
    args = parser.parse_args()
    strategies = [s for s in args.strategies.split(",") if s]
    kinds = tuple(k for k in KINDS if k in args.kinds.split(","))
    rates: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="dtgui-bench-") as tmp:
        bundles = {s: export_bundle(Path(tmp), s, args.steps) for s in strategies}
        for rnd in range(args.rounds):
            for strategy in strategies:
                order = kinds[rnd % len(kinds):] + kinds[:rnd % len(kinds)]
                for kind in order:
                    rate = measure(kind, strategy, bundles[strategy], args.steps, args.warmup)
                    if rate is not None:
                        rates.setdefault((strategy, kind), []).append(rate)
                        print(f"round {rnd + 1}: {strategy:22} {kind:18} {rate:8.1f} steps/s",
                              flush=True)

    def median(strategy: str, kind: str) -> float | None:
        values = rates.get((strategy, kind))
        return statistics.median(values) if values else None

    print(f"\nmedians of {args.rounds} rounds, {args.steps} steps, steady rate after step "
          f"{args.warmup} (steps/s):")
    print(f"{'strategy':22} " + " ".join(f"{k:>18}" for k in KINDS)
          + f" {'dtgui/hand':>11} {'monitoring':>11} {'split':>8}")
    for strategy in strategies:
        cells = [median(strategy, k) for k in KINDS]
        dtgui, off, no_split, hand, _ = cells
        ratio = f"{dtgui / hand:.2f}" if dtgui and hand else "-"
        cost = f"{(off - dtgui) / off * 100:+.1f} %" if dtgui and off else "-"
        split = f"{(no_split - dtgui) / no_split * 100:+.1f} %" if dtgui and no_split else "-"
        print(f"{strategy:22} " + " ".join(f"{c:18.1f}" if c else f"{'-':>18}" for c in cells)
              + f" {ratio:>11} {cost:>11} {split:>8}")
    if REPORTING:
        print(f"\nlive events and loss summaries, timed inside each dtgui run: "
              f"{statistics.median(REPORTING) * 100:.2f} % of the training time (median of "
              f"{len(REPORTING)} runs; max {max(REPORTING) * 100:.2f} %)")
    if CALIBRATION:
        setup, each, share = (statistics.median(c[i] for c in CALIBRATION) for i in range(3))
        print(f"the split's calibration, timed inside each dtgui run (median of "
              f"{len(CALIBRATION)}): making the calibration runs {setup:.2f} s once, each "
              f"calibration {each * 1000:.1f} ms, all of it "
              f"{share * 100:.2f} % of the training time "
              f"(max {max(c[2] for c in CALIBRATION) * 100:.2f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
