"""Screenshots of the real app under Xvfb: home, then the dashboard of a real demo run.

  xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python packaging/screenshots/screenshot_app.py OUTDIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import shots

from dtgui.ui.app import make_app
from dtgui.ui.main_window import MainWindow


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "screenshots")
    out.mkdir(parents=True, exist_ok=True)
    app = make_app()
    window = MainWindow()
    window.resize(1500, 920)
    window.show()
    shots.wait_for(app, lambda: window.machine.facts is not None
                   and window.machine.facts.tf is not None, 120)
    shots.save(app, window, out / "1-home.png")
    window.train_demo()
    shots.wait_for(app, lambda: window.session.source is not None, 60)
    shots.wait_for(app, lambda: window.session.source.metrics.snapshot().step >= 150, 180)
    shots.settle(app, 1.0)  # let the dashboard's 4 Hz text catch up
    shots.save(app, window, out / "2-dashboard-running.png")
    shots.wait_for(app, lambda: window.session.source.finished, 180)
    shots.settle(app, 0.5)
    shots.save(app, window, out / "3-dashboard-finished.png")
    print(f"run {window.session.source.state}; screenshots in {out}")
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
