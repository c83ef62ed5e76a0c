"""Soak: the dashboard redraws 5,000 times with new data (DTGUI_SOAK_REDRAWS=50000 for the
long soak); None's reference count and the process's memory stay flat.

PySide6 6.12 with pyqtgraph crashed after some 20,000 redraws on Python 3.11 ("Fatal Python
error: none_dealloc": a reference to None released once too often per redraw, until None's
count reached zero). This test sees such a leak long before the crash: None's count would
fall by about one per redraw. Memory is read after a warm-up and at the end.
"""

from __future__ import annotations

import gc
import os
import sys

import numpy as np
import psutil
from fakes import FakeRun, event, steps_fields
from pytestqt.qtbot import QtBot

from dtgui.core.events import Event
from dtgui.core.live_run import LiveRun
from dtgui.ui.pages.dashboard import Dashboard

REDRAWS = int(os.environ.get("DTGUI_SOAK_REDRAWS", "5000"))
WARM_UP = min(2000, REDRAWS // 5)
STEPS = 20


def passes(count: int) -> list[list[Event]]:
    """Runs that restart from step 0 (the curves rewind) and train STEPS steps again, with
    other losses each time: every redraw feeds new data to every curve, and the series stay
    short. Made once: the soak measures the dashboard, not the making of events."""
    out = []
    for i in range(count):
        steps = np.arange(1, STEPS + 1, dtype=np.float32)
        losses = np.stack([1.0 / steps + 0.01 * i, 1.1 / steps + 0.01 * i], axis=1)
        out.append([
            event("started", replicas=2, replica_ids=[0, 1], steps=STEPS, resumed_from_step=0),
            event("steps", **steps_fields(1, losses.astype(np.float32),
                                          examples_per_sec=100.0 + i)),
            event("device", devices=[{"kind": "cpu", "index": 0, "util": float(10 * i),
                                      "mem_used": 2**30, "mem_total": 2**34}]),
        ])
    return out


def test_redraws_keep_none_and_memory_flat(qtbot: QtBot) -> None:
    variants = passes(7)
    metrics = LiveRun(STEPS)
    dash = Dashboard()
    qtbot.addWidget(dash)
    dash.resize(900, 600)
    dash.show()
    dash.attach(FakeRun(metrics), run_name="soak", strategy="mirrored")
    dash.timer.stop()  # redraws are driven here, as fast as they go
    process = psutil.Process()
    none_before = rss_before = 0
    for i in range(REDRAWS):
        metrics.add_events(variants[i % len(variants)])
        before = dash.redraw_count
        dash.refresh()
        assert dash.redraw_count == before + 1
        dash.repaint()
        if i % 64 == 0:
            qtbot.wait(0)  # let Qt deliver what it posted
        if i == WARM_UP:
            gc.collect()
            none_before, rss_before = sys.getrefcount(None), process.memory_info().rss
    gc.collect()
    none_after, rss_after = sys.getrefcount(None), process.memory_info().rss
    drawn = REDRAWS - WARM_UP
    # A leak of one reference per redraw would be ~drawn; allow for objects alive now
    assert none_after >= none_before - drawn // 50, (none_before, none_after)
    assert rss_after - rss_before < 48 * 2**20, (rss_before, rss_after)
    dash.detach()
