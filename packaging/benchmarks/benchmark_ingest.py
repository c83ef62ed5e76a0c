"""Is the dashboard responsive while a big run pours in? (a script, not a test)

    xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python packaging/benchmarks/benchmark_ingest.py

Eight writer processes (the training tasks' part: they run outside the GUI process) append
`steps` events, written by the training program's own writer and codec, for 16 replicas
each, at --rate steps per second in all (default 50,000, e.g. 8 tasks x 6,250 steps/s, a
batch per task every 0.2 s as the training program sends them). In this process, as in the
GUI: a background thread reads the events files with the LocalExecutor's polls into
LiveRun every 0.2 s (the run controller's reading path), and the Dashboard redraws from
its 20 Hz timer. A 10 ms probe QTimer measures how late the UI thread serves it (event
latency), and every dashboard frame is timed: the tick (snapshot, curves fed, ranges) and the
plots' paints that Qt runs after it.
Targets: event latency p99 <= 50 ms; frames <= 16 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

if not os.environ.get("DISPLAY"):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

TARGET_LATENCY_MS, TARGET_FRAME_MS = 50.0, 16.0
TASKS, REPLICAS, BATCH_SECONDS = 8, 16, 0.2


def write_task(path: str, task_index: int, rate: float, seconds: float) -> None:
    """One task's events: a batch of rate*0.2 steps every 0.2 s (run in its own process)."""
    import numpy as np

    from dtgui.worker import step_batch
    from dtgui.worker.events import EventWriter

    ids = list(range(task_index * REPLICAS, (task_index + 1) * REPLICAS))
    writer = EventWriter(path, f"worker:{task_index}")
    writer.emit("started", replicas=REPLICAS, replica_ids=ids, steps=int(rate * seconds) + 1)
    rng = np.random.default_rng(task_index)
    per_batch = max(1, int(rate * BATCH_SECONDS))
    began, first = time.monotonic(), 1
    while time.monotonic() - began < seconds:
        at = np.arange(first, first + per_batch)
        losses = (2.3 * np.exp(-at / 200_000)[:, None] + 0.1 * rng.random((per_batch, REPLICAS)))
        losses = losses.astype(np.float32)
        means = losses.mean(axis=1)
        writer.emit("steps", first=first, count=per_batch, stride=1, epoch=1, replica_ids=ids,
                    encoding=step_batch.ENCODING, losses=step_batch.encode(losses),
                    means=step_batch.encode(means), loss=float(means[-1]),
                    examples_per_sec=rate * 32)
        if first % (per_batch * 10) == 1:
            writer.emit("device", devices=[{"kind": "gpu", "index": 0, "util": 95.0,
                                            "mem_used": 60 * 2**30, "mem_total": 80 * 2**30}])
        first += per_batch
        time.sleep(max(0.0, began + (first / rate) - time.monotonic()))
    writer.emit("finished", steps=first - 1, loss=float(means[-1]), seconds=seconds)
    writer.close()


class Source:
    """What the dashboard follows: the metrics the reader thread fills."""

    def __init__(self, bundle: object, metrics: object) -> None:
        self.bundle = bundle
        self.metrics = metrics
        self.finished = False
        self.state = "running"
        self.message = ""

    def request_stop(self) -> None:
        pass


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=50_000, help="steps per second in all")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--writer", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writer:
        path, index, rate, seconds = args.writer
        write_task(path, int(index), float(rate), float(seconds))
        return 0

    from pyqtgraph.widgets.GraphicsView import GraphicsView
    from PySide6.QtCore import Qt, QTimer
    from PySide6.QtWidgets import QApplication

    from dtgui.core.bundles.bundle import render_bundle
    from dtgui.core.live_run import LiveRun
    from dtgui.core.plans.placement import place_local
    from dtgui.core.plans.plan import Plan
    from dtgui.launch.exec.local_exec import LocalExecutor
    from dtgui.ui.pages.dashboard import Dashboard

    app = QApplication.instance() or QApplication(sys.argv[:1])
    with tempfile.TemporaryDirectory(prefix="dtgui-ingest-") as tmp:
        plan = place_local(Plan(run_name="ingest", strategy="multi_worker_mirrored",
                                workers=TASKS, replicas_per_task=1, device_kind="gpu",
                                steps=int(args.rate * args.seconds), checkpoint_every=0))
        bundle = render_bundle(plan, Path(tmp) / "ingest")
        metrics = LiveRun(plan.steps)
        executor = LocalExecutor(bundle)
        source = Source(bundle, metrics)
        dash = Dashboard()
        dash.resize(1400, 900)
        dash.show()
        # A frame: a tick of the dashboard's timer that drew something (its refresh), and the
        # paints of the plots Qt then runs from the event loop (a plot's scene is painted
        # after the tick, not inside it).
        frames: list[float] = []
        frames_cpu: list[float] = []
        paints_cpu: list[float] = []
        painted = [0.0, 0.0]  # wall, CPU ms of the paints since the last frame's tick
        refresh = dash.refresh
        panels = (dash.loss_panel, dash.throughput_panel, dash.device_panel)

        def close_frame() -> None:
            if len(paints_cpu) < len(frames):
                frames[-1] += painted[0]
                frames_cpu[-1] += painted[1]
                paints_cpu.append(painted[1])
            painted[0] = painted[1] = 0.0

        def timed_refresh() -> None:
            """A tick that draws something (not timed: a tick with nothing new, which costs
            next to nothing)."""
            close_frame()
            began, began_cpu = time.perf_counter(), time.thread_time()
            drawn = dash.redraw_count
            due = any(c.backlog for p in panels for c in p.curve_sets)
            refresh()
            if dash.redraw_count == drawn and not due:
                return
            frames.append((time.perf_counter() - began) * 1000)
            frames_cpu.append((time.thread_time() - began_cpu) * 1000)

        original_paint = GraphicsView.paintEvent

        def timed_paint(view: GraphicsView, event: object) -> None:
            began, began_cpu = time.perf_counter(), time.thread_time()
            original_paint(view, event)
            painted[0] += (time.perf_counter() - began) * 1000
            painted[1] += (time.thread_time() - began_cpu) * 1000

        GraphicsView.paintEvent = timed_paint  # type: ignore[method-assign]
        dash.timer.timeout.disconnect()
        dash.timer.timeout.connect(timed_refresh)
        dash.attach(source, run_name="ingest", strategy="multi_worker_mirrored")

        stop = threading.Event()
        ingested = [0]

        def reader() -> None:
            while not stop.is_set():
                poll = executor.poll()
                for tp in poll.tasks.values():
                    metrics.add_events(tp.events)
                ingested[0] = sum(len(x) for x, _ in metrics.snapshot().replica_loss.values())
                stop.wait(0.2)

        writers = [subprocess.Popen([sys.executable, __file__, "--writer",
                                     str(bundle.events_file(task)), str(i),
                                     str(args.rate / TASKS), str(args.seconds)], cwd=REPO)
                   for i, task in enumerate(plan.tasks)]
        thread = threading.Thread(target=reader, daemon=True)
        thread.start()

        lateness: list[float] = []
        probe = QTimer()
        probe.setInterval(10)
        expected = [time.perf_counter() + 0.01]

        def tick() -> None:
            now = time.perf_counter()
            lateness.append(max(0.0, (now - expected[0]) * 1000))
            expected[0] = now + 0.01

        probe.timeout.connect(tick)
        probe.setTimerType(Qt.TimerType.PreciseTimer)
        probe.start()

        def quit_when_done() -> None:
            if all(w.poll() is not None for w in writers):
                app.quit()

        done = QTimer()
        done.timeout.connect(quit_when_done)
        done.start(100)
        began = time.perf_counter()
        app.exec()  # the GUI's own event loop
        elapsed = time.perf_counter() - began
        done.stop()
        probe.stop()
        close_frame()
        stop.set()
        thread.join()
        for poll in (executor.poll(),):
            for tp in poll.tasks.values():
                metrics.add_events(tp.events)
        points = sum(len(x) for x, _ in metrics.snapshot().replica_loss.values())
        dash.detach()
        dash.close()
    steps_per_s = points / REPLICAS / elapsed
    print(f"ingested {points:,} losses ({points // REPLICAS:,} task-steps, "
          f"{steps_per_s:,.0f} step events/s) from {TASKS} tasks x {REPLICAS} replicas "
          f"in {elapsed:.1f} s; platform {QApplication.platformName()}")
    print(f"UI event latency (10 ms probe timer, {len(lateness)} ticks): p50 "
          f"{percentile(lateness, 0.5):.1f} ms, p99 {percentile(lateness, 0.99):.1f} ms, max "
          f"{max(lateness):.1f} ms (target p99 <= {TARGET_LATENCY_MS:.0f} ms)")
    print(f"dashboard frames ({len(frames)} ticks of its 20 Hz timer with something new): mean "
          f"{statistics.fmean(frames):.1f} ms, p99 {percentile(frames, 0.99):.1f} ms, max "
          f"{max(frames):.1f} ms (target <= {TARGET_FRAME_MS:.0f} ms); CPU of the UI thread "
          f"per frame: mean {statistics.fmean(frames_cpu):.1f} ms, p99 "
          f"{percentile(frames_cpu, 0.99):.1f} ms (less sensitive to other processes), of which "
          f"painting the plots {statistics.fmean(paints_cpu):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
