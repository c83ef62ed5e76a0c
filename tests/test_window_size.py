"""The main window on a 1366x768 screen: its minimum size fits, opening each page (the
dashboard of a run, Runs, a sweep, Compare) or the wizard leaves the window's size alone, and
no page shows a text cut (`cut_text`); what Home says of a failed launch."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from cut_text import cut_texts, lay_out_now
from PySide6.QtCore import QSize
from PySide6.QtWidgets import QMessageBox, QScrollArea, QWidget
from pytestqt.exceptions import TimeoutError as WaitTimeout
from pytestqt.qtbot import QtBot
from test_sweep_view import make_sweep
from training_events import T0, write_run

from dtgui.core.machines.registry import Machine, MachineRegistry
from dtgui.core.plans.placement import place_plan
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.run_index import RunRow
from dtgui.core.settings import runs_dir, save_last_plan
from dtgui.ui.main_window import MainWindow
from dtgui.ui.pages.local_machine import LocalMachinePanel
from dtgui.ui.wizard.review_page import ReviewPage

pytestmark = pytest.mark.gui

SMALL = QSize(1366, 768)


def fits(size: QSize) -> bool:
    return size.width() <= SMALL.width() and size.height() <= SMALL.height() - 60  # a panel


def scrolls(window: MainWindow) -> str:
    """What the pages need when it is more room than the window gives them ("" if not)."""
    area = window.findChild(QScrollArea, "pagesArea")
    assert area is not None
    holder = area.widget()
    assert holder is not None
    need, room = holder.minimumSizeHint(), area.viewport().size()
    if need.width() > room.width() or need.height() > room.height():
        pages = [window.pages.widget(i) for i in range(window.pages.count())]
        wide = [(type(p).__name__, p.minimumSizeHint()) for p in pages if p is not None]
        return f"need {need}, room {room}: {wide}"
    return ""


def test_every_page_fits_1366x768_and_none_widens_the_window(
        qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(LocalMachinePanel, "refresh", lambda self: None)  # no TensorFlow probe
    runs = [write_run(runs_dir(), name, created=T0 + i, seed=i)
            for i, name in enumerate(("adam-fast", "sgd-slow"))]
    make_sweep(tmp_path / "sweep")
    window = MainWindow()
    qtbot.addWidget(window)
    window.resize(SMALL.width(), SMALL.height() - 60)
    window.show()
    size = window.size()
    _ = window.machines  # the left column complete, as a moment after start
    assert window.left_column.isVisible()  # beside Home

    def opened(page: object, what: str) -> None:
        qtbot.waitUntil(lambda: window.pages.currentWidget() is page, timeout=60_000)
        qtbot.wait(50)  # layouts settle
        assert window.size() == size, f"{what} resized the window to {window.size()}"
        assert not window.left_column.isVisible(), f"the left column takes width on {what}"
        assert fits(window.minimumSizeHint()), f"{what}: minimum {window.minimumSizeHint()}"
        assert not scrolls(window), f"{what}: {scrolls(window)}"
        # nothing cut: no label wider than itself, no column title wider than its
        # column, no axis title longer than its axis
        assert not cut_texts(window), f"{what}: {cut_texts(window)}"

    window.show_runs()
    qtbot.waitUntil(lambda: window.runs_page.row_count() == 3, timeout=60_000)  # and the sweep
    opened(window.runs_page, "Runs")
    # runs still training read in bold: their state ("running · watched", the longer
    # "running · not watched") is read whole too, here and beside the column
    shown = [window.runs_page.row_at(r) for r in range(3)]
    running = [RunRow(folder=f"/runs/{name}", name=name, state="running", active=True,
                      started=T0 + 10, steps=1650, total_steps=40_000)
               for name in ("long-a", "long-b")]
    window.runs_page.show_rows(running + shown, watched={running[0].folder})
    assert [window.runs_page.cell_text(r, 1) for r in range(2)] == [
        "running · watched", "running · not watched"]
    qtbot.wait(20)
    assert not cut_texts(window), f"Runs with runs training: {cut_texts(window)}"
    window.acts.column.trigger()  # and beside the column, measured once laid out
    lay_out_now()
    assert window.left_column.isVisible()
    assert not cut_texts(window), f"Runs beside the column: {cut_texts(window)}"
    window.acts.column.trigger()
    lay_out_now()
    window.compare_runs(runs)
    assert window.compare is not None
    qtbot.waitUntil(lambda: window.compare is not None
                    and window.compare.table.columnCount() == 2, timeout=60_000)
    opened(window.compare, "Compare")
    window.open_sweep(tmp_path / "sweep")
    view = window.sweep_view
    assert view is not None
    qtbot.waitUntil(lambda: view.table.rowCount() == 5, timeout=60_000)
    opened(view, "the sweep view")
    window._open_run(runs[0])
    qtbot.waitUntil(lambda: window.dashboard is not None, timeout=60_000)
    dashboard = window.dashboard
    assert dashboard is not None
    opened(dashboard, "the dashboard")

    # The column beside every page (View menu): it comes back, and every page still fits.
    window.acts.column.trigger()
    assert window.left_column.isVisible()
    pages: list[QWidget] = [window.runs_page, window.compare, view, dashboard]
    for page in pages:
        window.pages.setCurrentWidget(page)
        # the layouts settle over a few event-loop turns (more of them on a loaded machine)
        with contextlib.suppress(WaitTimeout):
            qtbot.waitUntil(lambda: not scrolls(window) and not cut_texts(window),
                            timeout=5_000)
        assert window.size() == size
        assert fits(window.minimumSizeHint()), f"{page}: minimum {window.minimumSizeHint()}"
        assert not scrolls(window), scrolls(window)
        assert not cut_texts(window), f"{page} beside the column: {cut_texts(window)}"
    window.acts.column.trigger()
    window.acts.home.trigger()
    assert window.left_column.isVisible()  # Home always shows it
    qtbot.wait(20)
    assert not cut_texts(window), f"Home: {cut_texts(window)}"

    # a long run name is read whole on the review
    name = "resnet50-imagenet-lr0.1-bs1024-run7"
    save_last_plan(Plan(run_name=name, strategy=Strategy.MIRRORED))
    window.open_wizard()
    wizard = window.wizard
    assert wizard is not None
    qtbot.waitUntil(wizard.isVisible, timeout=60_000)
    assert window.size() == size
    assert fits(wizard.minimumSize()), wizard.minimumSize()
    for page_id in wizard.pageIds():  # the tallest page scrolls rather than grow the wizard
        step = wizard.page(page_id)
        assert fits(step.minimumSizeHint() + QSize(0, 250)), f"{step}: {step.minimumSizeHint()}"
    for _ in wizard.pageIds()[:-1]:  # each page as the user reaches it
        assert not cut_texts(wizard), f"wizard page {wizard.currentId()}: {cut_texts(wizard)}"
        wizard.next()
        qtbot.wait(20)
    assert not cut_texts(wizard), f"wizard page {wizard.currentId()}: {cut_texts(wizard)}"
    review = wizard.currentPage()
    assert isinstance(review, ReviewPage)
    assert review.summary_values["Run name"].text() == name
    wizard.reject()


def test_a_launch_failure_on_home_goes_once_its_machine_is_removed(
        qtbot: QtBot, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run placed on a registered machine that refuses the connection: Home says it could
    not start until that machine is removed."""
    monkeypatch.setattr(LocalMachinePanel, "refresh", lambda self: None)
    box = Machine("box", "127.0.0.1", port=1, user="me")  # port 1: refused at once
    MachineRegistry().add(box)
    plan = place_plan(Plan(run_name="on-box", strategy=Strategy.ONE_DEVICE, steps=5),
                      {"worker:0": "box"}, {"box": box}, {"box": [23456]})
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    panel = window.machines
    qtbot.waitUntil(lambda: len(panel.machines()) == 1, timeout=60_000)
    monkeypatch.setattr(QMessageBox, "warning", lambda *_a, **_k: None)
    window.launch(plan)
    qtbot.waitUntil(lambda: window.home.failed, timeout=60_000)
    assert "Could not start" in window.home.status.text()
    panel.table.selectRow(0)
    panel.machine_actions.remove_selected(confirm=False)
    qtbot.waitUntil(lambda: not window.home.failed, timeout=60_000)
    assert window.home.status.text() == ""
