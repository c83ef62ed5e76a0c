"""Screenshots of a sweep at 1366x768 and 1920x1080 in the real main window: the sweep view
(its table of trials over the plots) and the dialog that sets a sweep up, at its own size
and filling the screen.

  xvfb-run -a -s "-screen 0 1920x1080x24" .venv/bin/python \
      packaging/screenshots/screenshot_sweep_sizes.py OUTDIR

The sweep is written as its queue leaves it (tests/test_sweep_view.py's `make_sweep`: six
trials, finished, pruned and failed); nothing trains.
"""

from __future__ import annotations

import sys
from pathlib import Path

import shots

home = shots.sandbox()

from test_sweep_view import make_sweep  # noqa: E402 - the tests' sweep

from dtgui.core.plans.plan import Plan  # noqa: E402 - after the sandbox
from dtgui.ui.app import make_app  # noqa: E402
from dtgui.ui.main_window import MainWindow  # noqa: E402

SIZES = ((1366, 768), (1920, 1080))


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    folder = home / "sweeps" / "lr-batch"
    make_sweep(folder)
    app = make_app()
    window = MainWindow()
    window.show()
    if shots.sweep_view(app, window, folder) is None:
        return 1
    for width, height in SIZES:
        window.resize(width, height)
        shots.shoot(app, window, out, f"sweep_view_{width}x{height}", 0.5)
    dialog = window.sweep_plan(Plan(run_name="resnet-baseline"))
    shots.shoot(app, dialog, out, "sweep_dialog", 0.3)
    for width, height in SIZES:
        dialog.resize(width, height - 60)  # a panel's height left
        shots.shoot(app, dialog, out, f"sweep_dialog_{width}x{height}", 0.3)
    dialog.reject()
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
