"""Render the dashboard of a half-way run whose tasks measured where their step time goes
(one input-bound worker) and save a PNG, for reviewing how the split and the verdict look.

    xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python packaging/screenshots/screenshot_split.py out.png

Options: --workers N, --size WxH, --limit input|communication|compute; --bundle DIR shows a
real run's events instead (an exported bundle run with `bash run.sh`), and what its profile
says of the input when it captured one; --banners shows every bar above the plots at once
(the saved model, a profile's line in the header and on the card, other processes filling
the CPU: the verdict's second line) and the Learning rate panel (the CPU card a third of the
row), for how the plots keep their height under them and the readouts fit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

if not os.environ.get("DISPLAY"):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import shots
from screenshot_dashboard import DemoController, fill, save_dashboard, shown_dashboard

from dtgui.core.events import parse_line, read_all
from dtgui.core.live_run import LiveRun
from dtgui.core.measure.profile_input import ProfileInput
from dtgui.launch.trackers.xprof_input import newest_traces
from dtgui.ui.app import make_app
from dtgui.worker.plan import Plan

# seconds per step: input wait, compute, communication, reporting (the slow one last)
SPLITS = {
    "input": [(0.004, 0.118, 0.031, 0.0004), (0.131, 0.051, 0.027, 0.0004)],
    "communication": [(0.002, 0.041, 0.160, 0.0004), (0.003, 0.043, 0.158, 0.0004)],
    "compute": [(0.001, 0.181, 0.018, 0.0004), (0.002, 0.179, 0.019, 0.0004)],
}


def add_splits(metrics: LiveRun, workers: int, limit: str, t: float) -> None:
    rows = SPLITS[limit]
    for w in range(workers):
        parts = rows[min(w, len(rows) - 1)] if w == workers - 1 else rows[0]
        fields = dict(zip(("input", "compute", "communication", "reporting"), parts,
                          strict=True))
        line = json.dumps({"v": 2, "kind": "split", "task": f"worker:{w}", "t": t,
                           "step": 1130, "steps": 250, "method": "calibrated",
                           "measured": list(fields), **fields, "calibration_seconds": 1.1,
                           "setup_seconds": 0.3, "training_seconds": 236.0,
                           "clock_seconds": 251.0})
        event = parse_line(line)
        assert event is not None
        metrics.add_events([event])


def add_banners(metrics: LiveRun, workers: int, t: float) -> None:
    """A saved model and every task's machine full of other processes' work."""
    lines = [{"v": 2, "kind": "model_saved", "task": "worker:0", "t": t, "step": 1000,
              "role": "final", "path": "model/model.keras", "savedmodel": "model/saved_model"}]
    lines += [{"v": 2, "kind": "device", "task": f"worker:{w}", "t": t + i,
               "devices": [{"kind": "cpu", "index": 0, "name": "AMD EPYC 7B13", "util": 99.0,
                            "task_util": 8.0, "mem_used": 700 * 2**20,
                            "mem_total": 16 * 2**30}]}
              for w in range(workers) for i in range(8)]
    events = [parse_line(json.dumps(line)) for line in lines]
    metrics.add_events([e for e in events if e is not None])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--size", default="1600x1000")
    parser.add_argument("--limit", default="input", choices=sorted(SPLITS))
    parser.add_argument("--bundle", type=Path, default=None)
    parser.add_argument("--banners", action="store_true")
    args = parser.parse_args()
    app = make_app(sys.argv[:1])
    metrics = LiveRun(2000)
    plan = None
    if args.bundle is not None:
        plan = Plan.load(str(args.bundle / "plan.json"))
        for path in sorted((args.bundle / "output").glob("events-*.jsonl")):
            metrics.add_events(read_all(path))
    else:
        fill(metrics, workers=args.workers, replicas=2 * args.workers, steps=2000, done=1130,
             steps_per_epoch=250, failed=False, lr=0.001 if args.banners else 0.0)
        add_splits(metrics, args.workers, args.limit, 1_700_000_000.0 + 1130 * 0.21)
        if args.banners:
            add_banners(metrics, args.workers, 1_700_000_000.0 + 1130 * 0.21)
    demo = DemoController(metrics, plan=plan)
    if args.bundle is not None:  # its profile, if it has one, is read onto the card
        demo.output_dir = args.bundle / "output"
    dash = shown_dashboard(app, args.size, demo, run_name=demo.run_name,
                           strategy=str(demo.plan.strategy), device_kind="cpu")
    if args.bundle is not None and newest_traces(demo.output_dir):
        shots.wait_for(app, dash.step_split.profile_label.isVisible, 60)
    if args.banners:
        dash.header.set_profile("profiling steps 1131–1150…")
        dash.step_split.set_profile_inputs([
            ProfileInput(f"worker:{w}", 1131, 1150, 0.61 if w else 0.02, 4.2)
            for w in range(args.workers)])
    dash._text_time = 0.0
    dash.refresh()
    return save_dashboard(app, dash, args.out)


if __name__ == "__main__":
    sys.exit(main())
