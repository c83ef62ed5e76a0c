"""Screenshots of the real app: home, then the dashboard of a real demo run before its first
step, while it trains and once it finished, in a sandbox (shots.sandbox: none of the user's
runs, machines or keys).

  xvfb-run -a -s "-screen 0 1920x1080x24" .venv/bin/python packaging/screenshots/screenshot_app.py OUTDIR [WxH]

WxH is the window's size (1500x920 unless given: 1366x768 and 1920x1080 are the screens the
docs promise).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import shots

if not os.environ.get("DISPLAY"):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "screenshots")
    width, height = (int(v) for v in (sys.argv[2] if len(sys.argv) > 2 else "1500x920")
                     .split("x"))
    out.mkdir(parents=True, exist_ok=True)
    shots.sandbox()  # before dtgui is imported: its folders are read at import

    from dtgui.ui.app import make_app
    from dtgui.ui.main_window import MainWindow

    app = make_app()
    window = MainWindow()
    window.resize(width, height)
    window.show()
    shots.wait_for(app, lambda: window.machine.facts is not None
                   and window.machine.facts.tf is not None, 120)
    shots.save(app, window, out / "1-home.png")
    window.train_demo()
    shots.wait_for(app, lambda: window.session.source is not None, 60)
    # before the first step: what the plots wait for, what the run does meanwhile
    shots.wait_for(app, lambda: window.dashboard is not None
                   and window.dashboard.loss_panel.waiting_label.text(), 60)
    shots.settle(app, 1.0)
    shots.save(app, window, out / "2-dashboard-starting.png")
    shots.wait_for(app, lambda: window.session.source.metrics.snapshot().step >= 150, 180)
    shots.settle(app, 1.0)  # let the dashboard's 4 Hz text catch up
    shots.save(app, window, out / "3-dashboard-running.png")
    shots.wait_for(app, lambda: window.session.source.finished, 180)
    shots.settle(app, 1.0)
    shots.save(app, window, out / "4-dashboard-finished.png")
    print(f"run {window.session.source.state}; screenshots in {out}")
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
