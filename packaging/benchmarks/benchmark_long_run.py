"""A run of a million steps: its events on disk, and how fast dtgui shows it again.

    .venv/bin/python packaging/benchmarks/benchmark_long_run.py [--steps 1000000] [--replicas 16]

Synthesizes the events of one task training --steps steps on --replicas replicas, written by
the training program's own writer as it writes them (a `steps` event per call of
--per-call steps, device telemetry every 2 s of the run's time, an epoch event every 1,000
steps), then, each in a fresh process as the GUI would be:

- Open: the Runs page's path (`open_run`: every event read into the dashboard's metrics) and
  the first complete frame of the dashboard;
- Reattach: the controller's path (the LocalExecutor's polls from offset 0 into the metrics,
  as on Reattach) and the first complete frame;

printing the events file's size, the seconds to a drawn dashboard and the process's memory.
Targets: <= 100 MB per task on disk; <= 2 s to a fully drawn dashboard; GUI process <= 500 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

TARGET_MB, TARGET_SECONDS, TARGET_RSS_MB = 100.0, 2.0, 500.0


def synthesize(root: Path, steps: int, replicas: int, per_call: int) -> Path:
    import numpy as np

    from dtgui.core.bundles.bundle import render_bundle
    from dtgui.core.plans.placement import place_local
    from dtgui.core.plans.plan import Plan
    from dtgui.core.runs.records import RunRecord
    from dtgui.worker import step_batch
    from dtgui.worker.events import EventWriter

    plan = Plan(run_name="million", strategy="mirrored", replicas_per_task=replicas,
                steps=steps, steps_per_epoch=1000, checkpoint_every=0)
    bundle = render_bundle(place_local(plan), root / "million")
    task = bundle.plan.tasks[0]
    events = EventWriter(bundle.events_file(task), task.task_id)
    rng = np.random.default_rng(7)
    ids = list(range(replicas))
    events.emit("started", replicas=replicas, replica_ids=ids, devices=[], strategy="mirrored",
                global_batch=32 * replicas, steps=steps, resumed_from_step=0)
    seconds_per_step, next_device, t = 0.002, 0.0, 0.0
    for first in range(1, steps + 1, per_call):
        count = min(per_call, steps - first + 1)
        at = np.arange(first, first + count)
        base = 2.3 * np.exp(-at / (steps / 5)) + 0.05
        losses = (base[:, None] * (1 + 0.2 * rng.standard_normal((count, replicas))))
        losses = losses.astype(np.float32)
        means = losses.mean(axis=1)
        events.emit("steps", first=first, count=count, stride=1, epoch=(at[-1] - 1) // 1000 + 1,
                    replica_ids=ids, encoding=step_batch.ENCODING,
                    losses=step_batch.encode(losses), means=step_batch.encode(means),
                    loss=float(means[-1]), examples_per_sec=16000.0)
        t += count * seconds_per_step
        if t >= next_device:
            next_device = t + 2.0
            events.emit("device", devices=[{"kind": "gpu", "index": i, "name": "NVIDIA H100",
                                            "util": 90.0, "mem_used": 60 * 2**30,
                                            "mem_total": 80 * 2**30} for i in range(8)])
        if at[-1] // 1000 != (first - 1) // 1000:
            events.emit("epoch", epoch=int(at[-1] // 1000), loss=float(means.mean()),
                        accuracy=0.9, steps=int(at[-1]))
    events.emit("finished", steps=steps, loss=float(means[-1]), seconds=t)
    events.close()
    record = RunRecord(run_id="million", run_name="million", bundle=str(bundle.path),
                       strategy="mirrored", created=time.time(), state="finished")
    record.save()
    return bundle.path


def show(bundle: str, how: str) -> dict[str, float]:
    """In this (fresh) process: read the run `how` (open / reattach), draw the dashboard."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import resource

    import psutil
    from PySide6.QtWidgets import QApplication

    from dtgui.core.runs.records import RunRecord
    from dtgui.ui.pages.dashboard import Dashboard

    app = QApplication.instance() or QApplication(sys.argv[:1])
    dash = Dashboard()
    dash.resize(1280, 800)
    dash.show()
    app.processEvents()
    base_rss = psutil.Process().memory_info().rss
    record = RunRecord.load(Path(bundle))
    began = time.perf_counter()
    if how == "open":
        from dtgui.launch.runs.history import open_run

        source = open_run(record)
    else:
        source = reattached(record)
    read = time.perf_counter() - began
    dash.attach(source)  # its 20 Hz timer feeds the series a frame had no time for
    while not dash.fully_drawn:  # every series fed, and painted (by the render thread too)
        app.processEvents()
        time.sleep(0.001)
    dash.repaint()
    app.processEvents()
    drawn = time.perf_counter() - began
    snap = source.metrics.snapshot()
    points = sum(len(x) for x, _ in snap.replica_loss.values())
    rss = psutil.Process().memory_info().rss
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    dash.detach()
    dash.close()
    return {"read": read, "drawn": drawn, "points": points, "rss_mb": rss / 2**20,
            "peak_mb": peak / 2**20, "base_mb": base_rss / 2**20, "step": snap.step}


class _Reattached:
    """What Reattach builds (the controller's reading path: executor polls into metrics),
    without its failure policy: every task of this synthetic run has long ended."""

    finished = True
    state = "finished"
    message = ""
    record = None
    restarts = max_restarts = 0

    def __init__(self, bundle: Any, metrics: Any) -> None:
        self.bundle = bundle
        self.metrics = metrics
        self.plan = bundle.plan
        self.run_name = bundle.plan.run_name
        self.output_dir = bundle.output

    @property
    def final_loss(self) -> float | None:
        return self.metrics.final_loss()

    def request_stop(self) -> None:
        pass

    def detach(self) -> None:
        pass


def reattached(record: object) -> _Reattached:
    from dtgui.core.bundles.bundle import Bundle
    from dtgui.core.live_run import LiveRun
    from dtgui.launch.exec.local_exec import LocalExecutor

    bundle = Bundle.open(record.bundle)  # type: ignore[attr-defined]
    metrics = LiveRun(bundle.plan.steps)
    executor = LocalExecutor(bundle)
    executor.reset_offsets()
    while True:
        poll = executor.poll()
        new = [tp for tp in poll.tasks.values() if tp.raw_events or tp.raw_log]
        for tp in poll.tasks.values():
            metrics.add_events(tp.events)
            metrics.add_log_lines(tp.task, tp.log_lines)
        if not new:
            return _Reattached(bundle, metrics)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--replicas", type=int, default=16)
    parser.add_argument("--per-call", type=int, default=250,
                        help="steps per training call (one event each)")
    parser.add_argument("--show", nargs=2, metavar=("BUNDLE", "HOW"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.show:
        print(json.dumps(show(*args.show)))
        return 0
    with tempfile.TemporaryDirectory(prefix="dtgui-long-") as tmp:
        began = time.perf_counter()
        bundle = synthesize(Path(tmp), args.steps, args.replicas, args.per_call)
        size = sum(p.stat().st_size for p in (bundle / "output").glob("events-*.jsonl"))
        print(f"synthesized {args.steps:,} steps x {args.replicas} replicas in "
              f"{time.perf_counter() - began:.1f} s; events on disk: {size / 1e6:.1f} MB "
              f"(target <= {TARGET_MB:.0f} MB per task)", flush=True)
        for how in ("open", "reattach"):
            out = subprocess.run([sys.executable, __file__, "--show", str(bundle), how],
                                 capture_output=True, text=True, timeout=600,
                                 env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
            if out.returncode != 0:
                print(out.stderr[-3000:])
                return 1
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{how:8}: {r['points']:,.0f} points read in {r['read']:.2f} s, dashboard "
                  f"drawn at {r['drawn']:.2f} s (target <= {TARGET_SECONDS:.0f} s); GUI "
                  f"process {r['rss_mb']:.0f} MB after, peak {r['peak_mb']:.0f} MB (target "
                  f"<= {TARGET_RSS_MB:.0f} MB; {r['base_mb']:.0f} MB before reading)",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
