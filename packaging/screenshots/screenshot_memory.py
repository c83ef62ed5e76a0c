"""Render the dashboard of a half-way GPU run on two machines, one GPU near its memory limit,
with the doctor's last measurement of the link between the machines, and save a PNG, for
reviewing the Memory and network card.

    xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python packaging/screenshots/screenshot_memory.py out.png

The GPU figures are the H100 capture's (tests/fixtures/gpu), one GPU filled to 93 %; the
link is what the throttled-link test measured (95 Mbit/s). Files go to a temporary data dir.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

if not os.environ.get("DISPLAY"):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["DTGUI_DATA_DIR"] = tempfile.mkdtemp(prefix="dtgui-shot-memory-")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import shots
from screenshot_dashboard import DemoController, _ev, fill, save_dashboard, shown_dashboard
from screenshot_split import add_splits

from dtgui.core.live_run import LiveRun
from dtgui.core.measure.network_pairs import LINKS_FILE, LinkTest, save_links
from dtgui.core.settings import data_dir
from dtgui.ui.app import make_app

H100 = ("NVIDIA H100 80GB HBM3", 85520809984)
USED = {(0, 0): 1563230208 * 21, (0, 1): 1563230208 * 21, (1, 0): 1563230208 * 22,
        (1, 1): int(0.93 * H100[1])}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", default="1600x1000")
    args = parser.parse_args()
    app = make_app(sys.argv[:1])
    save_links(data_dir() / LINKS_FILE, [
        LinkTest(a, b, 23456, rtt_ms=0.42, bandwidth=rate / 8, sent=16 << 20,
                 received=16 << 20, measured_at=time.time() - 240)
        for a, b, rate in (("gpu-box-1", "gpu-box-2", 95.1e6), ("gpu-box-2", "gpu-box-1",
                                                                 94.6e6))])
    metrics = LiveRun(2000)
    fill(metrics, workers=2, replicas=4, steps=2000, done=1130, steps_per_epoch=250,
         failed=False)
    t = 1_700_000_000.0 + 1130 * 0.21
    for w in range(2):
        metrics.set_task_machine(f"worker:{w}", f"gpu-box-{w + 1}")
        # the GPUs wait for the other machine's gradients part of the time (the link is
        # nearly full): busy, then idle, as NVML samples them every 2 s
        for i in range(8):
            util = 97.0 if i % 3 else 4.0
            metrics.add_events([_ev("device", f"worker:{w}", t - 16 + 2 * i,
                                    net={"rx": 10.9e6 - 0.2e6 * w, "tx": 11.0e6 - 0.1e6 * i},
                                    devices=[{"kind": "gpu", "index": g, "name": H100[0],
                                              "util": util, "mem_used": USED[(w, g)],
                                              "mem_total": H100[1]} for g in range(2)])])
    add_splits(metrics, 2, "communication", t)
    dash = shown_dashboard(app, args.size, DemoController(metrics),
                           run_name="digits-mwm-20261124-2010", strategy="multi_worker_mirrored",
                           device_kind="gpu")
    dash._text_time = 0.0
    dash.refresh()
    shots.settle(app, 1.0)  # the kept links are read in the thread pool
    return save_dashboard(app, dash, args.out)


if __name__ == "__main__":
    sys.exit(main())
