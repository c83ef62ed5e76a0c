"""The queued runs ("Launch when free", `dtgui.launch.queue.run_queue`), for the Runs page: each
with its position, what it waits for (or why it could not start) and when it was queued;
Move up, Move down and Cancel (asked first: `confirm_cancel`), in every state before the run
trains (one whose launch is under way is stopped as soon as it has started).

The queue is read off the UI thread every REFRESH_MS while the window is shown (its process
writes what each run waits for); a look also starts the queue's process again when runs wait
and none runs (after a reboot). The panel hides itself when nothing is queued. `changed` is
emitted when runs leave or join the queue (one that leaves has started, or was cancelled):
the runs list is then read again. A damaged queue file is said with what to do, and nothing
is changed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.runs.queue_file import FAILED, QueueError

if TYPE_CHECKING:
    from dtgui.launch.queue.run_queue import QueuedRun
from dtgui.ui.workers import error_message, run_in_thread

REFRESH_MS = 3000
COLUMNS = ("#", "Run", "Waits for", "Queued")
_ID = Qt.ItemDataRole.UserRole


def _look(folder: Path | None) -> list[QueuedRun]:
    """The queue now; its process started again when runs wait and none runs. (The queue
    and the launch layer under it are imported here, in a worker: not before the first
    window.)"""
    from dtgui.launch.queue.run_queue import queue_dir, queued_runs, resume_queue

    folder = folder or queue_dir()
    resume_queue(folder)
    return queued_runs(folder)


def _cancel(entry_id: str, folder: Path | None) -> None:
    from dtgui.launch.queue.run_queue import cancel_queued

    cancel_queued(entry_id, folder)


def _move(entry_id: str, by: int, folder: Path | None) -> None:
    from dtgui.launch.queue.run_queue import move_queued

    move_queued(entry_id, by, folder)


class RunQueuePanel(QWidget):
    """Queued runs, in order, with cancel and reorder."""

    changed = Signal()  # runs joined or left the queue

    def __init__(self, folder: Path | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("runQueue")
        self.folder = folder  # None: the data folder's queue
        self.runs: list[QueuedRun] = []
        self.error = ""
        self._reading = False

        title = QLabel("<b>Queued runs</b> — each starts when its GPUs and machines are free")
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("queueTable")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.up_button = QPushButton("Move up")
        self.down_button = QPushButton("Move down")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Take the run out of the queue (asked first).")
        self.up_button.clicked.connect(lambda: self.move_selected(-1))
        self.down_button.clicked.connect(lambda: self.move_selected(1))
        self.cancel_button.clicked.connect(self.cancel_selected)
        self.message = QLabel()
        self.message.setObjectName("queueError")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message.setStyleSheet("color: #b91c1c;")
        self.message.setVisible(False)

        buttons = QHBoxLayout()
        buttons.addWidget(self.up_button)
        buttons.addWidget(self.down_button)
        buttons.addWidget(self.cancel_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(title)
        layout.addWidget(self.table)
        layout.addLayout(buttons)
        layout.addWidget(self.message)
        self.table.setMaximumHeight(160)
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self._tick)
        self._timer.start()
        self._update_buttons()
        self.setVisible(False)

    # -- reading ---------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read the queue again (in a worker)."""
        if self._reading:
            return
        self._reading = True
        folder = self.folder
        run_in_thread(lambda: _look(folder), self._show, self._failed, context=self)

    def _tick(self) -> None:
        if self.window().isVisible():
            self.refresh()

    def _show(self, runs: list[QueuedRun]) -> None:
        self._reading = False
        before = [q.entry.id for q in self.runs]
        chosen = self.selected()
        self.runs = runs
        self._set_error("")
        self.table.setRowCount(len(runs))
        for row, queued in enumerate(runs):
            entry = queued.entry
            cells = (str(queued.position), entry.name, queued.text,
                     time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.queued)))
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(_ID, entry.id)
                item.setToolTip(text)
                self.table.setItem(row, col, item)
            if entry.id == chosen:
                self.table.selectRow(row)
        self.setVisible(bool(runs))
        self._update_buttons()
        if [q.entry.id for q in runs] != before:
            self.changed.emit()

    def _failed(self, exc: BaseException) -> None:
        self._reading = False
        self._set_error(str(exc) if isinstance(exc, QueueError) else error_message(exc))

    def _set_error(self, text: str) -> None:
        self.error = text
        self.message.setText(text)
        self.message.setVisible(bool(text))
        if text:
            self.setVisible(True)

    # -- acting ----------------------------------------------------------------------------
    def selected(self) -> str:
        """The id of the selected queued run ("" for none)."""
        items = self.table.selectedItems()
        return str(items[0].data(_ID)) if items else ""

    def select(self, entry_id: str) -> None:
        for row, queued in enumerate(self.runs):
            if queued.entry.id == entry_id:
                self.table.selectRow(row)

    def cancel_selected(self) -> None:
        """Cancel the selected run, asked first."""
        queued = next((q for q in self.runs if q.entry.id == self.selected()), None)
        if queued is not None and self.confirm_cancel(queued):
            chosen = queued.entry.id
            self._act(lambda: _cancel(chosen, self.folder))

    def confirm_cancel(self, queued: QueuedRun) -> bool:
        """Whether to cancel `queued`, asked; says what becomes of it."""
        entry = queued.entry
        if entry.state == FAILED:
            what = "It could not start; it leaves the queue."
        elif entry.launching:
            what = "Its launch is under way: the run is stopped as soon as it has started."
        else:
            what = "Nothing of it was started; it leaves the queue."
        box = QMessageBox(QMessageBox.Icon.Question, "Cancel the queued run?",
                          f"Cancel {entry.name}?", parent=self)
        box.setInformativeText(what)
        cancel = box.addButton("Cancel the run", QMessageBox.ButtonRole.DestructiveRole)
        keep = box.addButton("Keep it queued", QMessageBox.ButtonRole.RejectRole)
        box.setDefaultButton(keep)
        box.setEscapeButton(keep)
        box.exec()
        return box.clickedButton() is cancel

    def move_selected(self, by: int) -> None:
        chosen = self.selected()
        if chosen:
            self._act(lambda: _move(chosen, by, self.folder))

    def _act(self, action: Callable[[], None]) -> None:
        for button in (self.up_button, self.down_button, self.cancel_button):
            button.setEnabled(False)

        def done(_: object) -> None:
            self._reading = False
            self.refresh()

        self._reading = True  # a look now would show the queue before the change
        run_in_thread(action, done, self._failed, context=self)

    def _update_buttons(self) -> None:
        chosen = self.selected()
        row = next((i for i, q in enumerate(self.runs) if q.entry.id == chosen), -1)
        self.cancel_button.setEnabled(row >= 0)
        self.up_button.setEnabled(row > 0)
        self.down_button.setEnabled(0 <= row < len(self.runs) - 1)
