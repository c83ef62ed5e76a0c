"""Screenshots of one window following two runs at once: the dashboard with its switcher
between them, and the Runs page with their rows live. Run it once per screen size:

  for size in 1366x768 1920x1080; do
    xvfb-run -a -s "-screen 0 ${size}x24" .venv/bin/python \
        packaging/screenshots/screenshot_many_runs.py OUTDIR
  done

PNGs: OUTDIR/many-runs-dashboard-WIDTH.png, OUTDIR/many-runs-runs-WIDTH.png. The runs train
with the tests' stub child (tests/stub_task.py: the bundle's real supervisor and events, no
TensorFlow), in a sandbox (shots.sandbox); they are stopped at the end.
"""

from __future__ import annotations

import sys

import shots

shots.sandbox()

from runs import stub_python  # noqa: E402 - after the sandbox (tests/ on the path)

from dtgui.core.plans.placement import place_local  # noqa: E402
from dtgui.core.plans.plan import MachineAccess, Plan  # noqa: E402
from dtgui.core.plans.strategies import Strategy  # noqa: E402
from dtgui.ui.app import make_app  # noqa: E402
from dtgui.ui.main_window import MainWindow  # noqa: E402

DESKTOP_CHROME = 60  # a panel and a title bar, in pixels of height


def plan(name: str, python: str, steps: int) -> Plan:
    placed = place_local(Plan(run_name=name, strategy=Strategy.MIRRORED, replicas_per_task=2,
                              steps=steps, steps_per_epoch=100, checkpoint_every=0))
    return placed.with_changes(machines={"local": MachineAccess(python=python)})


def main() -> int:
    out = shots.out_dir(sys.argv)
    if out is None:
        return 2
    app = make_app([])
    area = app.primaryScreen().availableGeometry()
    width = area.width()
    window = MainWindow()
    window.resize(width, area.height() - DESKTOP_CHROME)
    window.show()
    python = stub_python(step_seconds=0.03)
    window.launch(plan("mirrored-lr-0.01", python, 3000))
    shots.wait_until(app, lambda: window.session.source is not None, 120)
    first = window.session
    window.launch(plan("mirrored-lr-0.1", python, 2400))
    shots.wait_until(app, lambda: window.session is not first
                     and window.session.source is not None, 120)
    source = window.session.source
    assert source is not None
    shots.wait_until(app, lambda: source.metrics.progress().done >= 600, 120)
    shots.shoot(app, window, out, f"many-runs-dashboard-{width}", seconds=1.0)
    shots.shrink(out / f"many-runs-dashboard-{width}.png")
    window.show_runs()
    shots.wait_until(app, lambda: window.runs_page.row_count() >= 2, 30)
    shots.shoot(app, window, out, f"many-runs-runs-{width}", seconds=2.5)
    shots.shrink(out / f"many-runs-runs-{width}.png")
    for session in window.runs.live():
        session.request_stop()
    shots.wait_until(app, lambda: not window.runs.live(), 120)
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
