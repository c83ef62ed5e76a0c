"""Screenshots of the Runs page's queued runs in the real main window at 1366x768 and
1920x1080: a run that could not start (its model file deleted while it waited), one whose
launch is under way, one waiting for a run started with `dtgui run`; and Cancel's question.

  xvfb-run -a -s "-screen 0 1920x1080x24" .venv/bin/python packaging/screenshots/screenshot_queue.py OUTDIR

The queue file is written as the queue's process leaves it; no queue process runs and
nothing trains.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import shots

shots.sandbox()

import dtgui.launch.queue.run_queue as run_queue  # noqa: E402 - after the sandbox
from dtgui.core.plans.plan import Plan  # noqa: E402
from dtgui.core.runs.queue_file import FAILED, STARTING, QueueEntry  # noqa: E402

ENTRIES = [
    QueueEntry("q3f9a01c2", Plan(run_name="resnet-own-model").to_dict(), state=FAILED,
               queued=time.time() - 1800,
               error="model file /home/me/models/resnet.py does not exist: choose it again."),
    QueueEntry("q7b21d0e4", Plan(run_name="bert-small").to_dict(), state=STARTING,
               queued=time.time() - 900, started=time.time()),
    QueueEntry("qc04e9a57", Plan(run_name="mlp-lr-0.01").to_dict(), queued=time.time() - 60,
               waits_for="run export-A on this machine"),
]


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    run_queue.change_queue(run_queue.queue_dir(), lambda _: ENTRIES)
    run_queue.resume_queue = lambda *_a, **_k: None  # shown as written: nothing starts

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    from dtgui.ui.app import make_app
    from dtgui.ui.main_window import MainWindow

    app = make_app()
    window = MainWindow()
    window.show()
    window.show_runs()
    panel = window.queue_panel
    panel.refresh()
    shots.wait_until(app, lambda: panel.table.rowCount() == len(ENTRIES), 30)
    panel.select(ENTRIES[1].id)
    for width, height in ((1366, 768), (1920, 1080)):
        window.resize(width, height)
        shots.settle(app, 0.5)
        shots.save(app, window, out / f"run_queue_{width}x{height}.png")

    def grab() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(50, grab)
            return
        shots.settle(app, 0.3)
        shots.save(app, box, out / "run_queue_cancel_question.png")
        box.reject()

    window.resize(1366, 768)
    QTimer.singleShot(50, grab)
    panel.confirm_cancel(panel.runs[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
