"""What tests of Qt widgets share to read them where Qt or the app types them as optional: a
table's cell (an empty cell has no item), a question answered, the main window's dashboard (made on its first run)
and the run it follows, for the tests that expect one there; the main window opened and its run
stopped as a person does; the wizard's Slurm box, its target choice and its job (the wizard
types a box and its job generically)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractButton,
    QApplication,
    QMessageBox,
    QRadioButton,
    QTableWidget,
    QTableWidgetItem,
)
from runs import live_members

from dtgui.launch.controller import RunController

if TYPE_CHECKING:  # the dashboard loads pyqtgraph: only the tests that show one import it
    from pytestqt.qtbot import QtBot

    from dtgui.kinds.slurm.box import SlurmBox
    from dtgui.kinds.slurm.job import SlurmJob
    from dtgui.ui.main_window import MainWindow
    from dtgui.ui.pages.dashboard import Dashboard
    from dtgui.ui.wizard.machines_box import MachinesBox
    from dtgui.ui.wizard.review_page import ReviewPage


def cell(table: QTableWidget, row: int, column: int) -> QTableWidgetItem:
    """The item at (`row`, `column`); fails the test when that cell is empty."""
    item = table.item(row, column)
    assert item is not None, f"no item at row {row}, column {column}"
    return item


def cell_text(table: QTableWidget, row: int, column: int) -> str:
    """The text at (`row`, `column`); fails the test when that cell is empty."""
    return cell(table, row, column).text()


def dashboard_of(window: MainWindow) -> Dashboard:
    """The window's dashboard (made on its first run); fails the test before that."""
    assert window.dashboard is not None, "the window has shown no run yet"
    return window.dashboard


def controller_of(window: MainWindow) -> RunController:
    """The run the window follows, launched or reattached by this app (a RunController)."""
    source = window.session.source
    assert isinstance(source, RunController), source
    return source


def ready_window(qtbot: QtBot, windows: list[MainWindow] | None = None) -> MainWindow:
    """The app's main window, shown, its machines panel ready; closed after the test by qtbot,
    or by the test's own `windows` fixture when given it."""
    from dtgui.ui.app import make_app
    from dtgui.ui.main_window import MainWindow

    make_app([])
    window = MainWindow()
    if windows is None:
        qtbot.addWidget(window)
    else:
        windows.append(window)
    window.show()
    qtbot.waitUntil(window.machines.ready, timeout=60_000)
    return window


def answer_question(qtbot: QtBot, button_text: str, seen: list[str],
                    texts: list[str] | None = None) -> None:
    """Click `button_text` in the message box that is about to open (exec() blocks); its
    title is added to `seen` (its text to `texts`)."""
    def click() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(50, click)
            return
        seen.append(box.windowTitle())
        if texts is not None:
            texts.append(box.text())
        next(b for b in box.buttons() if b.text() == button_text).click()

    QTimer.singleShot(50, click)


def click_stop(qtbot: QtBot, button: QAbstractButton) -> None:
    """Click a run's Stop button; a run that has gone on for a minute asks first (under load
    a test's run may): answer Stop."""
    def answer() -> None:
        box = QApplication.activeModalWidget()
        if isinstance(box, QMessageBox):
            for choice in box.buttons():
                if choice.text() == "Stop":
                    choice.click()

    QTimer.singleShot(0, answer)
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def stop_with_the_button(qtbot: QtBot, window: MainWindow) -> None:
    """Stop the window's run with the dashboard's Stop button: it ends "stopped" and leaves no
    process of its tasks behind; then the window is closed."""
    controller = controller_of(window)
    with qtbot.waitSignal(window.session.ended, timeout=60_000) as ended:
        click_stop(qtbot, dashboard_of(window).header.stop_button)
    assert ended.args[0] == "stopped"
    assert controller.record is not None
    pgids = list(controller.record.pids().values())
    qtbot.waitUntil(lambda: not live_members(pgids), timeout=60_000)
    window.close()


def slurm_box(box: MachinesBox) -> SlurmBox:
    """The review page's Slurm box (registered for the wizard's target choice)."""
    from dtgui.kinds.slurm.box import SlurmBox

    found = box.boxes[SlurmBox.kind]
    assert isinstance(found, SlurmBox)
    return found


def slurm_radio(box: MachinesBox) -> QRadioButton:
    """The target choice "Slurm cluster:"."""
    return box.radios[slurm_box(box).kind]


def slurm_job(review: ReviewPage) -> SlurmJob | None:
    """The Slurm job the review page's box made (None: another target)."""
    from dtgui.kinds.slurm.job import SlurmJob

    job = review.job
    assert job is None or isinstance(job, SlurmJob), f"not a Slurm job: {job!r}"
    return job
