"""Render the dashboard with realistic data and save a PNG (for reviewing how it looks).

    xvfb-run -a -s "-screen 0 1400x900x24" .venv/bin/python packaging/screenshots/screenshot_dashboard.py out.png

Without a DISPLAY it falls back to the offscreen platform. Options: --replicas N, --steps N,
--failed (a task fails), --size WxH, --profile TEXT (what a profile asked said, e.g.
"profile written").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

if not os.environ.get("DISPLAY"):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import shots
from PySide6.QtWidgets import QApplication

from dtgui.core.events import Event, parse_line
from dtgui.core.live_run import LiveRun
from dtgui.ui.app import make_app
from dtgui.ui.pages.dashboard import Dashboard
from dtgui.worker.plan import Plan


class DemoController:
    """A run that is half-way: metrics, the plan and folders the dashboard reads; nothing to
    stop."""

    def __init__(self, metrics: LiveRun, state: str = "running",
                 plan: Plan | None = None) -> None:
        self.metrics = metrics
        self.state = state
        self.message = ""
        self.finished = state not in ("running", "stopping")
        self.plan = plan or Plan(strategy="multi_worker_mirrored", per_replica_batch=32)
        self.run_name = plan.run_name if plan else "digits-mwm-20261124-2010"
        self.output_dir = Path("/tmp")
        self.record = None  # nothing to resume

    @property
    def bundle(self) -> SimpleNamespace:
        """Where the run's folder is (the dashboard's folder button)."""
        return SimpleNamespace(path=str(self.output_dir.parent))

    def request_stop(self) -> None:
        self.state = "stopping"

    def request_profile(self, steps: int, limit: float = 0.0, said: object = None) -> str:
        return "profile written"


def _ev(kind: str, task: str, t: float, **fields: object) -> Event:
    line = json.dumps({"v": 1, "kind": kind, "task": task, "t": t, **fields})
    event = parse_line(line)
    assert event is not None
    return event


def fill(metrics: LiveRun, *, workers: int, replicas: int, steps: int, done: int,
         steps_per_epoch: int, failed: bool, lr: float = 0.0) -> None:
    """A run's events up to step `done`; `lr`: the learning rate its steps report (0: none,
    no Learning rate panel)."""
    rng = np.random.default_rng(7)
    t0 = 1_700_000_000.0
    per_task = replicas // workers
    events: list[Event] = []
    for w in range(workers):
        task = f"worker:{w}"
        ids = list(range(w * per_task, (w + 1) * per_task))
        events.append(_ev("started", task, t0, replicas=per_task, replica_ids=ids,
                          devices=[f"/cpu:{i}" for i in range(per_task)],
                          strategy="multi_worker_mirrored", global_batch=32 * replicas,
                          steps=steps, pid=4242 + w, host="127.0.0.1"))
        metrics.add_log_lines(task, [
            "2026-11-22 01:40:00 I tensorflow/core/util/port.cc:153] oneDNN custom operations are on.",
            f"dtgui worker {task}: TF_CONFIG task={task}, {per_task} logical CPU replicas",
            "Model: 3 Dense layers, 18,570 parameters",
        ])
    offsets = rng.uniform(-0.06, 0.06, replicas)
    seconds_per_step = 0.21
    for step in range(1, done + 1):
        t = t0 + step * seconds_per_step
        base = 2.3 * np.exp(-step / 140.0) + 0.18 + 0.25 * np.exp(-step / 900.0)
        for w in range(workers):
            ids = list(range(w * per_task, (w + 1) * per_task))
            losses = [float(max(0.02, base + offsets[r] + rng.normal(0, 0.05 + 0.08 * base)))
                      for r in ids]
            eps = 32 * replicas / seconds_per_step * (0.93 + 0.05 * rng.standard_normal())
            if step < 8:
                eps *= step / 8  # warm-up (tracing)
            events.append(_ev("step", f"worker:{w}", t, step=step,
                              epoch=(step - 1) // steps_per_epoch + 1, replica_losses=losses,
                              replica_ids=ids, loss=float(np.mean(losses)),
                              examples_per_sec=float(eps), **({"lr": lr} if lr else {})))
            if step % 2 == 0:
                util = float(np.clip(78 + 12 * rng.standard_normal(), 5, 100))
                mem = (610 + 40 * w + 120 * (1 - np.exp(-step / 60))) * 2**20
                events.append(_ev("device", f"worker:{w}", t, devices=[{
                    "kind": "cpu", "index": 0, "name": "AMD EPYC 7B13", "util": util,
                    "mem_used": int(mem), "mem_total": 16 * 2**30}]))
        if step % steps_per_epoch == 0:
            events.append(_ev("epoch", "worker:0", t, epoch=step // steps_per_epoch,
                              loss=base + 0.01, accuracy=float(min(0.99, 1.02 - base / 2.5)),
                              steps=steps_per_epoch))
            for w in range(workers):
                metrics.add_log_lines(f"worker:{w}", [
                    f"epoch {step // steps_per_epoch}: loss {base:.4f}"])
        if step % 50 == 0:
            for w in range(workers):
                metrics.add_log_lines(f"worker:{w}", [
                    f"step {step:>5}/{steps}  loss {base:.4f}  {32 * replicas / seconds_per_step:,.0f} ex/s"])
        if step % 250 == 0:
            events.append(_ev("checkpoint", "worker:0", t, step=step,
                              path=f"output/checkpoints/ckpt-{step // 250}"))
            metrics.add_log_lines("worker:0", [f"saved checkpoint ckpt-{step // 250} at step {step}"])
    metrics.add_events(events)
    if failed:
        metrics.add_events([_ev("failed", f"worker:{workers - 1}", t0 + done * seconds_per_step,
                                error="ResourceExhaustedError: OOM when allocating tensor with "
                                      "shape [4096,4096] on /job:worker/replica:0/task:1/cpu:0",
                                traceback="Traceback (most recent call last): ...")])


def shown_dashboard(app: QApplication, size: str, source: object, **attach: str) -> Dashboard:
    """A dashboard window of `size` (WxH) following `source`, its series drawn."""
    dash = Dashboard()
    w, h = (int(v) for v in size.split("x"))
    dash.resize(w, h)
    dash.setWindowTitle("dtgui — dashboard")
    dash.show()
    dash.attach(source, **attach)  # type: ignore[arg-type]
    shots.wait_for(app, lambda: dash.fully_drawn, 30)  # series fed, images painted
    return dash


def save_dashboard(app: QApplication, dash: Dashboard, out: Path) -> int:
    """Save `dash` as `out` and stop following its run; the exit status."""
    ok = shots.save(app, dash, out)
    dash.detach()
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--done", type=int, default=1130)
    parser.add_argument("--failed", action="store_true")
    parser.add_argument("--size", default="1280x800")
    parser.add_argument("--profile", default="")
    args = parser.parse_args()
    app = make_app(sys.argv[:1])  # the app's own style sheet, as users see it
    metrics = LiveRun(args.steps)
    fill(metrics, workers=args.workers, replicas=args.replicas, steps=args.steps,
         done=args.done, steps_per_epoch=250, failed=args.failed)
    controller = DemoController(metrics, "failed" if args.failed else "running")
    if args.failed:  # as the launcher leaves it: the others stopped, the message set
        failed = f"worker:{args.workers - 1}"
        for w in range(args.workers - 1):
            metrics.set_task_state(f"worker:{w}", "stopped", exit_code=-15)
        controller.message = f"{failed} failed: {metrics.snapshot().tasks[failed].error}"
    dash = shown_dashboard(app, args.size, controller, run_name="digits-mwm-20261122-014000",
                           strategy="multi_worker_mirrored", device_kind="cpu")
    if args.profile:  # as the dashboard shows a profile's outcome
        dash._profile_done(controller, args.profile)  # type: ignore[arg-type]
    status = save_dashboard(app, dash, args.out)
    dash.close()
    del dash
    return status


if __name__ == "__main__":
    sys.exit(main())
