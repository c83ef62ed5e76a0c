"""Frame time of the live dashboard with 16 replicas x 100,000 steps (a script, not a test).

    xvfb-run -a -s "-screen 0 1400x900x24" .venv/bin/python packaging/benchmarks/benchmark_dashboard.py

Uses $DISPLAY when set (a real window or Xvfb), else the offscreen platform. A frame is what
one 20 Hz tick costs when the run has moved on: one new step per task is added to the
LiveRun (not timed: the reader thread does that), then the dashboard takes a snapshot,
feeds every curve, and the window is repainted synchronously; the time of that redraw+paint
cycle is averaged over --frames frames (wall time; the UI thread's CPU time is printed too,
as it is less sensitive to other processes). For comparison, the same is then measured with
the raw series fed to pyqtgraph (its "peak" downsampling and clip-to-view only), then with
every point drawn antialiased. Exits 0 unless --check is given and the target is missed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

if not os.environ.get("DISPLAY"):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QApplication

from dtgui.core.events import Event
from dtgui.core.live_run import LiveRun
from dtgui.ui.pages.dashboard import Dashboard

TARGET_MS = 16.0


class BenchController:
    def __init__(self, metrics: LiveRun) -> None:
        self.metrics = metrics
        self.state = "running"
        self.message = ""
        self.finished = False

    def request_stop(self) -> None:
        self.state = "stopping"


class Feeder:
    """Makes the step/device events of a run with `workers` tasks of `per_task` replicas."""

    def __init__(self, workers: int, per_task: int, seed: int = 1) -> None:
        self.workers = workers
        self.per_task = per_task
        self.rng = np.random.default_rng(seed)
        self.t0 = 1_700_000_000.0
        self.step = 0

    def started(self) -> list[Event]:
        return [Event("started", f"worker:{w}", self.t0, {
            "replicas": self.per_task,
            "replica_ids": list(range(w * self.per_task, (w + 1) * self.per_task)),
            "steps": 0}) for w in range(self.workers)]

    def steps(self, count: int) -> list[Event]:
        events = []
        n = self.workers * self.per_task
        first = self.step + 1
        steps = np.arange(first, first + count)
        base = 2.3 * np.exp(-steps / 20_000.0) + 0.2
        noise = self.rng.normal(0.0, 0.05, size=(count, n))
        losses = (base[:, None] + noise).tolist()
        eps = (4000 + 200 * self.rng.standard_normal((count, self.workers))).tolist()
        for i, step in enumerate(steps.tolist()):
            t = self.t0 + step * 0.05
            for w in range(self.workers):
                ids = list(range(w * self.per_task, (w + 1) * self.per_task))
                row = losses[i][w * self.per_task:(w + 1) * self.per_task]
                events.append(Event("step", f"worker:{w}", t, {
                    "kind": "step", "step": step, "epoch": step // 1000 + 1, "replica_losses": row,
                    "replica_ids": ids, "loss": sum(row) / len(row),
                    "examples_per_sec": eps[i][w]}))
                if step % 40 == 0:
                    events.append(Event("device", f"worker:{w}", t, {"devices": [{
                        "kind": "cpu", "index": 0, "name": "cpu", "util": 70.0 + i % 30,
                        "mem_used": 700 * 2**20 + step * 1000, "mem_total": 2**34}]}))
        self.step += count
        return events


def measure(app: QApplication, dash: Dashboard, metrics: LiveRun, feeder: Feeder,
            frames: int) -> tuple[list[float], list[float]]:
    """Wall and CPU (this thread) milliseconds of each frame."""
    wall, cpu = [], []
    for _ in range(frames):
        metrics.add_events(feeder.steps(1))  # the reader thread's work: not timed
        start, start_cpu = time.perf_counter(), time.thread_time()
        dash.refresh()
        dash.repaint()
        app.processEvents()
        wall.append((time.perf_counter() - start) * 1000.0)
        cpu.append((time.thread_time() - start_cpu) * 1000.0)
    return wall, cpu


def plot_items(dash: Dashboard) -> list[pg.PlotDataItem]:
    panels = (dash.loss_panel, dash.throughput_panel, dash.device_panel)
    return [item for panel in panels for item in panel.plot.listDataItems()
            if isinstance(item, pg.PlotDataItem)]


def without_envelopes(dash: Dashboard) -> None:
    """Raw series to the PlotDataItems: pyqtgraph's own "peak" downsampling + clip-to-view."""
    for panel in (dash.loss_panel, dash.throughput_panel, dash.device_panel):
        for curves in panel.curve_sets:
            curves.set_use_envelope(False)


def make_naive(dash: Dashboard) -> None:
    """Every point drawn, antialiased: no envelope, no downsampling, no clip-to-view."""
    for panel in (dash.loss_panel, dash.throughput_panel, dash.device_panel):
        panel.plot.setDownsampling(ds=False, auto=False)
        panel.plot.setClipToView(False)
        panel.plot_widget.setAntialiasing(True)
        for curves in panel.curve_sets:
            curves.set_use_envelope(False)
    for item in plot_items(dash):
        item.setDownsampling(ds=1, auto=False)
        item.setClipToView(False)
        item.opts["antialias"] = True
        item.updateItems(styleUpdate=True)


def summary(times: list[float]) -> str:
    return (f"mean {statistics.fmean(times):.1f} ms, median {statistics.median(times):.1f} ms, "
            f"max {max(times):.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=16)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--frames", type=int, default=30)
    parser.add_argument("--naive-frames", type=int, default=5,
                        help="frames for each comparison (0: none)")
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--screenshot", type=Path, help="save the dashboard as a PNG at the end")
    parser.add_argument("--check", action="store_true",
                        help="exit with 1 when the mean frame time is over the target")
    args = parser.parse_args()

    app = QApplication.instance() or QApplication(sys.argv[:1])
    workers = 2 if args.replicas % 2 == 0 else 1
    feeder = Feeder(workers, args.replicas // workers)
    metrics = LiveRun(args.steps * 2)
    t = time.perf_counter()
    metrics.add_events(feeder.started())
    for _ in range(args.steps // 10_000):
        metrics.add_events(feeder.steps(10_000))
    metrics.add_events(feeder.steps(args.steps % 10_000))
    print(f"filled {args.replicas} replicas x {feeder.step:,} steps "
          f"in {time.perf_counter() - t:.1f} s", flush=True)

    dash = Dashboard()
    w, h = (int(v) for v in args.size.split("x"))
    dash.resize(w, h)
    dash.show()
    dash.attach(BenchController(metrics), run_name="benchmark", strategy="mirrored")
    dash.timer.stop()  # frames are driven by hand below
    t = time.perf_counter()
    dash.refresh()
    dash.repaint()
    app.processEvents()
    print(f"first frame (creates the curves): {(time.perf_counter() - t) * 1000:.0f} ms")
    measure(app, dash, metrics, feeder, 5)  # warm-up

    wall, cpu = measure(app, dash, metrics, feeder, args.frames)
    mean = statistics.fmean(wall)
    label = f"{args.replicas} replicas x {args.steps // 1000}k points"
    print(f"platform {QApplication.platformName()}, window {w}x{h}, {args.frames} frames: "
          f"{summary(wall)}; CPU of the UI thread: {summary(cpu)}")
    print(f"dashboard frame time ({label}): {mean:.1f} ms (target <= {TARGET_MS:.0f} ms)",
          flush=True)

    if args.screenshot:
        dash.grab().save(str(args.screenshot))
    if args.naive_frames:
        without_envelopes(dash)
        measure(app, dash, metrics, feeder, 1)
        plain, _ = measure(app, dash, metrics, feeder, args.naive_frames)
        print(f"pyqtgraph downsampling + clip-to-view only, no envelope ({label}): "
              f"{statistics.fmean(plain):.1f} ms ({summary(plain)})", flush=True)
        make_naive(dash)
        measure(app, dash, metrics, feeder, 1)
        naive, _ = measure(app, dash, metrics, feeder, args.naive_frames)
        print(f"without envelope/downsampling/clip-to-view, antialiased ({label}): "
              f"{statistics.fmean(naive):.1f} ms ({summary(naive)})", flush=True)

    dash.detach()
    dash.close()
    dash.deleteLater()
    app.processEvents()
    if mean > TARGET_MS:
        print(f"frame time over the {TARGET_MS:.0f} ms target"
              + (" (is the machine busy? see the CPU figure)" if not args.check else ""))
    return 1 if args.check and mean > TARGET_MS else 0


if __name__ == "__main__":
    sys.exit(main())
