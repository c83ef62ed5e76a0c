"""docs/images: every page of the real app at the Xvfb screen's size: Home, the dashboard of a
real demo run while it trains, Runs, a sweep's view, Compare of its two best trials, and the
wizard's first page (and its tallest, at 1366 px). Run it once per screen size:

  for size in 1366x768 1920x1080; do
    xvfb-run -a -s "-screen 0 ${size}x24" .venv/bin/python packaging/screenshots/screenshot_pages.py \
        docs/images SWEEP_FOLDER
  done

Each PNG is named PAGE-WIDTH.png (home-1366.png). The window takes the screen's width and its
height less 60 px (a desktop's panel and the window's title bar). SWEEP_FOLDER is a finished
sweep of the demo (`dtgui sweep SWEEP_FOLDER --trials 5 --param lr=loguniform:1e-3:1e-1
--param batch-size=choice:16,32,64 --steps 300 --validate-every 50`); the demo run trains
here, in a sandbox (shots.sandbox: nothing of the user's is read or written).
"""

from __future__ import annotations

import sys
from pathlib import Path

import shots

shots.sandbox()

from PySide6.QtCore import QItemSelectionModel  # noqa: E402
from PySide6.QtWidgets import QApplication, QScrollArea, QWidget  # noqa: E402

from dtgui.ui.app import make_app  # noqa: E402
from dtgui.ui.home_page import DEMO_STEPS  # noqa: E402
from dtgui.ui.main_window import MainWindow  # noqa: E402

DESKTOP_CHROME = 60  # a panel and a title bar, in pixels of height


def save(app: QApplication, widget: QWidget, out: Path, name: str) -> None:
    """`widget` settled, saved compressed as OUT/NAME.png."""
    shots.settle(app, 1.0)
    widget.repaint()
    app.processEvents()
    area = widget.findChild(QScrollArea, "pagesArea")
    if area is not None and (area.verticalScrollBar().isVisible()
                             or area.horizontalScrollBar().isVisible()):
        print(f"{name}: the page needs more room than the window has (it scrolls)",
              file=sys.stderr)
    path = out / f"{name}.png"
    ok = widget.grab().save(str(path), "PNG", 0)  # quality 0: the most compressed PNG
    if ok:
        shots.shrink(path)
    print(f"wrote {path}" if ok else f"could not write {path}", flush=True)


def compare_best_two(app: QApplication, window: MainWindow) -> bool:
    """The sweep view's two best finished trials selected and compared."""
    view = window.sweep_view
    data = view.table_data if view is not None else None
    if view is None or data is None:
        return False
    best = {r.number for r in data.rows if r.state == "finished"}
    best = set(sorted(best, key=lambda n: next(r.objective or 0.0 for r in data.rows
                                                 if r.number == n))[:2])
    view.table.clearSelection()
    flags = QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
    for row in range(view.table.rowCount()):
        item = view.table.item(row, 0)
        if item is not None and int(item.text()) in best:
            view.table.selectionModel().select(view.table.model().index(row, 0), flags)
    view.compare_button.click()
    compare = window.compare
    return compare is not None and shots.wait_for(
        app, lambda: len(compare.summaries) == len(best), 60)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(f"usage: {argv[0]} OUTDIR SWEEP_FOLDER", file=sys.stderr)
        return 2
    out, sweep = Path(argv[1]), Path(argv[2])
    out.mkdir(parents=True, exist_ok=True)
    app = make_app(argv[:1])
    area = app.primaryScreen().availableGeometry()
    width = area.width()
    window = MainWindow()
    window.resize(width, area.height() - DESKTOP_CHROME)
    window.show()
    size = window.size()
    shots.wait_until(app, lambda: window.machine.facts is not None
                     and window.machine.facts.tf is not None, 180)
    save(app, window, out, f"home-{width}")

    window.train_demo()
    shots.wait_until(app, lambda: window.session.source is not None, 120)
    source = window.session.source
    assert source is not None
    shots.wait_until(app, lambda: source.metrics.snapshot().step >= DEMO_STEPS // 2, 300)
    save(app, window, out, f"dashboard-{width}")
    shots.wait_until(app, lambda: source.finished, 300)

    window.show_runs()
    shots.wait_until(app, lambda: window.runs_page.row_count() > 0, 30)
    save(app, window, out, f"runs-{width}")

    window.open_sweep(sweep)
    view = window.sweep_view
    assert view is not None
    shots.wait_until(app, lambda: view.table.rowCount() > 0, 60)
    save(app, window, out, f"sweep-{width}")
    if not compare_best_two(app, window):
        print("Compare did not show the two best trials", file=sys.stderr)
        return 1
    save(app, window, out, f"compare-{width}")

    window.open_wizard()
    wizard = window.wizard
    assert wizard is not None
    save(app, wizard, out, f"wizard-{width}")
    if width < 1920:  # the wizard is as large as on a 1366-px screen: its tallest page
        wizard.next()  # scrolls there
        save(app, wizard, out, f"wizard-options-{width}")
    wizard.reject()
    if window.size() != size:
        print(f"the window changed its size by itself: {size} -> {window.size()}",
              file=sys.stderr)
        return 1
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
