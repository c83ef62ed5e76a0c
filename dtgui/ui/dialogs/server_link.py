"""Open in MLflow / Open in TensorBoard: the server started off the UI thread, a browser
asked to open the page, and the page's address always shown, with Copy (a browser may not
open, and `xdg-open` says it did when there is none). One dialog a service, shown at once
with what the start is doing and the seconds so far (a first MLflow start takes up to a
minute), filled when the server answers or saying why it did not; and what the page will
not show (the toolbar's MLflow with no run of dtgui sent), with the button that sends them."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFontMetrics, QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.runs.records import RunRecord
from dtgui.launch.trackers.local_server import ServicePage
from dtgui.ui.workers import error_message, run_in_thread

Page = Callable[[Callable[[str], None]], str | ServicePage]  # told each step; the page


class ServerLinkDialog(QDialog):
    """A service's page: its address (selectable, Copy), whether a browser was asked, or why
    the service did not start (selectable: an install command is copied from it)."""

    def __init__(self, service: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.service = service
        self.setWindowTitle(service)
        layout = QVBoxLayout(self)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.status)
        self.note = QLabel("")  # what the page will not show, and how to fix it
        self.note.setWordWrap(True)
        self.note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.note.setStyleSheet("color: #8a5a00;")
        layout.addWidget(self.note)
        self.export_button = QPushButton("Export to MLflow")
        self.export_button.setToolTip("Send the ended runs listed to this MLflow")
        self.export_button.clicked.connect(self._export)
        layout.addWidget(self.export_button, 0, Qt.AlignmentFlag.AlignLeft)
        self._unsent: list[RunRecord] = []
        row = QHBoxLayout()
        self.url = QLineEdit()
        self.url.setReadOnly(True)
        self.url.setPlaceholderText("starting…")
        # a run's address is long (experiment, run id, view): room for most of it, the
        # whole in the tooltip and selectable
        self.url.setMinimumWidth(QFontMetrics(self.url.font()).horizontalAdvance("M" * 44))
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy the address, to open it in any browser")
        self.copy_button.clicked.connect(self.copy)
        self.open_button = QPushButton("Open in browser")
        self.open_button.clicked.connect(self._open_again)
        row.addWidget(self.url, 1)
        row.addWidget(self.copy_button)
        row.addWidget(self.open_button)
        layout.addLayout(row)
        margins = layout.contentsMargins()
        self.setMinimumWidth(self.url.minimumWidth() + self.copy_button.sizeHint().width()
                             + self.open_button.sizeHint().width() + 2 * row.spacing()
                             + margins.left() + margins.right())
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.doing = ""  # what the start does now (set from its thread, shown each second)
        self._started = time.monotonic()
        self._ticker = QTimer(self)
        self._ticker.setInterval(1000)
        self._ticker.timeout.connect(self._tick)
        self.starting()

    def say(self, doing: str) -> None:
        """The start's step (called from its thread: only a string is set here)."""
        self.doing = doing

    def starting(self) -> None:
        self.doing = f"Starting {self.service}"
        self._started = time.monotonic()
        self._tick()
        self._ticker.start()
        self.url.clear()
        self.url.setToolTip("")
        self.note.hide()
        self.export_button.hide()
        for button in (self.copy_button, self.open_button):
            button.setEnabled(False)

    def _tick(self) -> None:
        seconds = int(time.monotonic() - self._started)
        self.status.setText(f"{self.doing}… {seconds} s")

    def show_page(self, page: ServicePage, asked: bool) -> None:
        self.show_url(page.url, asked)
        self._unsent = list(page.unsent)
        self.note.setText(page.note)
        self.note.setVisible(bool(page.note))
        self.export_button.setText(f"Export {len(page.unsent)} run(s) to MLflow")
        self.export_button.setVisible(bool(page.unsent))
        self.adjustSize()

    def _export(self) -> None:
        from dtgui.ui.dialogs.preferences import export_to_mlflow

        self.export_button.setEnabled(False)
        export_to_mlflow(self, self._unsent)

    def show_url(self, url: str, asked: bool) -> None:
        self._ticker.stop()
        self.url.setText(url)
        self.url.setToolTip(url)
        self.url.setCursorPosition(0)
        for button in (self.copy_button, self.open_button):
            button.setEnabled(True)
        said = ("Your browser was asked to open it; if no page opened, copy this address "
                "into a browser on this machine." if asked else
                "No browser could be asked to open it here: copy this address into a "
                "browser on this machine.")
        self.status.setText(f"{self.service} is at this address (it stops when dtgui quits). "
                            f"{said}")
        self.adjustSize()  # the longer text wraps onto more lines

    def show_error(self, message: str, command: str = "") -> None:
        """Why it did not start; a command to run first in the address's place (Copy)."""
        self._ticker.stop()
        self.status.setText(f"{self.service} could not be opened: {message}")
        self.url.setPlaceholderText("")
        self.url.setText(command)
        self.url.setCursorPosition(0)
        self.copy_button.setEnabled(bool(command))
        self.adjustSize()

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.url.text())
        self.copy_button.setText("Copied")

    def _open_again(self) -> None:
        from dtgui.launch.trackers.local_server import try_browser

        url = self.url.text()
        run_in_thread(lambda: try_browser(url), lambda _asked: None, context=self)


def place_at_top(dialog: QWidget, parent: QWidget) -> None:
    """The dialog at the top right of the parent's window, over its toolbar and the run's
    header rather than in its middle, where it would hide the loss plot while it stays
    open (it is not modal: the address is kept to copy)."""
    window = parent.window()
    frame = window.frameGeometry()
    inner = window.geometry()
    size = dialog.frameGeometry().size()
    margin = 12
    x = max(frame.left(), inner.right() - size.width() - margin)
    dialog.move(x, inner.top() + margin)


def open_service(parent: QWidget, service: str, page: Page) -> ServerLinkDialog:
    """Show `service`'s dialog and run `page` (start the server, saying each step to the
    function it is given; return the page's URL or ServicePage) then ask the browser, off
    the UI thread."""
    from dtgui.launch.trackers.local_server import try_browser

    name = f"serverLink-{service}"
    dialog = parent.findChild(ServerLinkDialog, name)
    if dialog is None:
        dialog = ServerLinkDialog(service, parent)
        dialog.setObjectName(name)
    dialog.starting()
    dialog.copy_button.setText("Copy")
    dialog.show()
    place_at_top(dialog, parent)
    dialog.raise_()

    def start() -> tuple[ServicePage, bool]:
        found = page(dialog.say)
        shown = found if isinstance(found, ServicePage) else ServicePage(found)
        return shown, try_browser(shown.url)

    def done(result: tuple[ServicePage, bool]) -> None:
        dialog.show_page(*result)

    def failed(exc: BaseException) -> None:
        dialog.show_error(error_message(exc), getattr(exc, "command", ""))

    run_in_thread(start, done, failed, context=dialog)
    return dialog


def open_in_tensorboard(parent: QWidget, folders: list[Path] | None = None) -> ServerLinkDialog:
    """TensorBoard on these runs' and sweeps' folders (None: every run dtgui lists)."""
    from dtgui.launch.trackers.tensorboard_server import start_tensorboard

    return open_service(parent, "TensorBoard", lambda say: start_tensorboard(folders, say=say).url)


def open_in_mlflow(parent: QWidget, folder: Path | None = None) -> ServerLinkDialog:
    """MLflow's UI at this run or sweep (None: dtgui's experiment, and what it lacks)."""
    from dtgui.launch.trackers.mlflow_ui import mlflow_page, overview_page

    if folder is None:
        return open_service(parent, "MLflow", overview_page)
    return open_service(parent, "MLflow", lambda say: mlflow_page(folder, say))
