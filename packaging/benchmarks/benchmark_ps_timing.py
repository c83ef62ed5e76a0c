"""What timing the ParameterServer workers' steps costs, measured side by side in one run.

    .venv/bin/python packaging/benchmarks/benchmark_ps_timing.py [--steps-per-call 16] [--pairs 60]

Exports the demo as a ParameterServer bundle (2 workers, 1 parameter server, batch 32),
starts its parameter server and workers (`tasks/*.sh`, as `run.sh` does) and plays the
coordinator in this process: the same model, data and optimizer, with two training calls
made by `dtgui.worker.loop.make_trainer`, one that times itself on its worker (its seconds,
its input wait, the worker's index: what the split reads) and one that does not. They run
alternately, one call in flight at a time, each pair back to back, so the machine's load
falls on both alike; the ratio of the pairs' medians is the cost. A run-to-run comparison
(packaging/benchmarks/benchmark_training.py) varies by ±30 % on a loaded 2-core machine, far more than
this cost.

Also times the round-trip run (`RoundTripRuns`) against a training step.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def export(root: Path) -> Path:
    out = root / "bundle"
    subprocess.run([sys.executable, "-m", "dtgui", "export", str(out), "--strategy",
                    "parameter_server", "--workers", "2", "--ps", "1", "--steps", "100000",
                    "--batch-size", "32", "--checkpoint-every", "0"],
                   check=True, cwd=REPO, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(REPO)})
    return out


def chief_tf_config(bundle: Path) -> str:
    for line in (bundle / "tasks" / "chief-0.sh").read_text().splitlines():
        if line.startswith("export TF_CONFIG="):
            return line.split("=", 1)[1].strip("'")
    raise RuntimeError("no TF_CONFIG in tasks/chief-0.sh")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps-per-call", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=60)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dtgui-ps-timing-"))
    bundle = export(root)
    env = {**os.environ, "PYTHON": sys.executable, "TF_CPP_MIN_LOG_LEVEL": "2"}
    servers = [subprocess.Popen(["sh", str(bundle / "tasks" / f"{task}.sh")], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
               for task in ("ps-0", "worker-0", "worker-1")]
    try:
        code = measure(bundle, args.steps_per_call, args.pairs)
    finally:
        for proc in servers:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
    sys.stdout.flush()
    # the coordinator's threads would report the stopped servers at interpreter exit
    os._exit(code)


def wait_for_servers(tf_config: str, timeout: float = 180.0) -> None:
    """Until every parameter server and worker listens (they import TensorFlow first)."""
    cluster = json.loads(tf_config)["cluster"]
    deadline = time.monotonic() + timeout
    for address in cluster["ps"] + cluster["worker"]:
        host, port = address.rsplit(":", 1)
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"nothing listens at {address}") from None
                time.sleep(0.5)


def measure(bundle: Path, k: int, pairs: int) -> int:
    os.environ["TF_CONFIG"] = chief_tf_config(bundle)
    wait_for_servers(os.environ["TF_CONFIG"])
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import tensorflow as tf

    from dtgui.worker import calibration_runs, loop
    from dtgui.worker.data import model_source
    from dtgui.worker.distribute import build_strategy
    from dtgui.worker.plan import Plan
    from dtgui.worker.run import build, configure

    plan = Plan.from_dict(json.loads((bundle / "plan.json").read_text()))
    os.chdir(bundle)
    configure(plan)
    info = build_strategy(plan, "chief:0")
    source = model_source(plan, str(bundle))
    model, optimizer, loss_obj, _ = build(source, info, plan)
    global_batch = plan.per_replica_batch * int(info.strategy.num_replicas_in_sync)
    dataset = loop.distributed_dataset(source, info, plan.seed, global_batch, 0)
    iterator = iter(dataset)
    trainers = {timed: loop.make_trainer(info, model, optimizer, loss_obj, global_batch,
                                         xla=False, float16=False, timed=timed)
                for timed in (True, False)}
    coordinator = info.coordinator
    steps = tf.constant(k, tf.int32)

    def call(timed: bool) -> tuple[float, list[float]]:
        began = time.perf_counter()
        remote = coordinator.schedule(trainers[timed].run, args=(iterator, steps))
        _, timing = remote.fetch()
        return time.perf_counter() - began, [float(x) for x in timing]

    for timed in (True, False, True, False):  # trace both, warm the workers up
        call(timed)
    seconds: dict[bool, list[float]] = {True: [], False: []}
    in_call: list[float] = []
    waits: list[float] = []
    for i in range(pairs):
        for timed in ((True, False) if i % 2 == 0 else (False, True)):
            wall, timing = call(timed)
            seconds[timed].append(wall)
            if timed:
                in_call.append(timing[1])
                waits.append(timing[2])
    runs = calibration_runs.RoundTripRuns(info, model)
    setup = runs.trace()
    n = max(4, k // 16)
    round_trips = [float(r[1]) / n for r in coordinator.fetch(runs.schedule(n, 8))]
    timed_call, plain_call = (statistics.median(seconds[t]) for t in (True, False))
    print(f"ParameterServer, 2 workers + 1 server, the demo, {k} steps a call, {pairs} pairs "
          f"(medians, one call in flight):")
    print(f"  call untimed      {plain_call * 1000:8.2f} ms  ({plain_call / k * 1000:.3f} ms "
          f"a step)")
    print(f"  call timed        {timed_call * 1000:8.2f} ms  ({timed_call / k * 1000:.3f} ms "
          f"a step)")
    print(f"  timed / untimed   {timed_call / plain_call:8.3f}  "
          f"(cost {(timed_call / plain_call - 1) * 100:+.1f} %)")
    print(f"  inside the call, as the worker timed it: {statistics.median(in_call) * 1000:.2f} "
          f"ms, input wait {statistics.median(waits) / k * 1000:.3f} ms a step")
    print(f"  round-trip run: {statistics.median(round_trips) * 1000:.3f} ms a round trip "
          f"(median of 8 calibration runs of {n}); made once in {setup:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
