"""The Runs page: every run and sweep, to find, open, compare, clone, export, tag, note,
archive and delete (docs/gui.md, "Runs").

The rows come from the runs folder's index and the known sweeps (`dtgui.launch.run_admin`),
read off the UI thread; the steps and best validation value of ended runs read for the first
time follow in a second pass. "Reattach" follows a running run again (also one that kept
training while dtgui was closed); "Open" shows an ended run's curves and logs from its local
bundle; a sweep's row expands to its trials and opens the sweep's view. The page is a column
of sections: `add_section` puts another one (queued runs) above the table.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QModelIndex, QPoint, Signal, SignalInstance
from PySide6.QtGui import QHideEvent, QShowEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMenu,
    QMessageBox,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.runs.records import RunHistory, RunRecord
from dtgui.core.runs.run_index import SWEEP, RunRow
from dtgui.ui.pages.live_rows import LiveRows
from dtgui.ui.pages.runs_buttons import RunsButtons
from dtgui.ui.pages.runs_delete import RunDelete
from dtgui.ui.pages.runs_export import RunExport
from dtgui.ui.pages.runs_model import COLUMNS, NAME, NOTE, TAGS, RunsFilter, RunsModel
from dtgui.ui.pages.runs_notes import RunNotes
from dtgui.ui.pages.runs_table import RunsTable
from dtgui.ui.workers import error_message, run_in_thread

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from dtgui.launch.runs.run_source import RunSource


def load_rows() -> tuple[list[RunRow], set[str], list[str]]:
    """The rows (ended runs read for the first time without their events), the folders of
    running runs a headless watcher follows (dtgui closed with Keep training) and the rows'
    texts the filter reads."""
    from dtgui.launch.run_admin import list_rows
    from dtgui.launch.start.watcher import watcher_pid

    rows = list_rows(summarize_ended=False)
    watched = {r.folder for r in rows if r.active and r.kind != SWEEP
               and watcher_pid(Path(r.folder)) is not None}
    return rows, watched, [r.text() for r in rows]


def _records(rows: list[RunRow]) -> list[RunRecord]:
    """The records of these runs (read from disk: off the UI thread)."""
    out = []
    for row in rows:
        record = RunHistory.read(Path(row.folder))
        if record is not None:
            out.append(record)
    return out


class RunsPage(QWidget):
    reattachRequested = Signal(object)  # RunRecord
    openRequested = Signal(object)  # RunRecord
    compareRequested = Signal(list)  # the RunRecords selected
    cloneRequested = Signal(object)  # the run's folder (Path): fill the wizard from its plan
    sweepRequested = Signal(object)  # a sweep's folder (Path): show its view
    # the run's folder (Path) and the step to train to (int; None: its plan's steps)
    resumeRequested = Signal(object, object)
    tensorboardRequested = Signal(list)  # the folders (Path) of the runs and sweeps selected
    mlflowRequested = Signal(list)  # the RunRecords selected: send them to MLflow
    mlflowOpenRequested = Signal(object)  # Path: the run's or sweep's folder, in MLflow's UI
    loaded = Signal(list)  # the rows just shown (RunRow)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("runsPage")
        title = QLabel("Runs")
        title.setObjectName("pageTitle")
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        self.model = RunsModel()
        self.proxy = RunsFilter(self.model)
        self.table = RunsTable(self.proxy)
        self.notes = RunNotes(self, self.model, self._failed)  # tags, notes, archived
        self.model.on_edit, self.model.on_note = self.notes.tags_edited, self.notes.set_note
        self.deletion = RunDelete(self, self.say, self.summary.setText, self._failed)
        self.deletion.deleted.connect(self._deleted)
        self.export = RunExport(self, self.say, self.summary.setText)

        self.filter_edit = QLineEdit()
        self.filter_edit.setObjectName("runsFilter")
        self.filter_edit.setPlaceholderText("Filter: name, state, strategy, machine, tag, note…")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.textChanged.connect(self.set_filter)
        self.archived_check = QCheckBox("Show archived")
        self.archived_check.toggled.connect(self._show_archived)
        top = QHBoxLayout()
        top.addWidget(self.filter_edit, 1)
        top.addWidget(self.archived_check)

        self.buttons = RunsButtons()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(24, 20, 24, 20)
        layout.addWidget(title)
        layout.addWidget(self.summary)
        self.sections = QVBoxLayout()  # other sections (queued runs) go above the table
        self.sections.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(self.sections)
        layout.addLayout(top)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.buttons)

        buttons = self.buttons
        buttons.refresh_button.clicked.connect(self.refresh)
        buttons.reattach_button.clicked.connect(
            lambda: self._emit_records(self.reattachRequested))
        buttons.open_button.clicked.connect(self._open)
        buttons.compare_button.clicked.connect(self._compare)
        buttons.clone_button.clicked.connect(self._clone)
        buttons.export_button.clicked.connect(self.export_selected)
        buttons.archive_button.clicked.connect(self._archive)
        buttons.delete_button.clicked.connect(self.delete_selected)
        self.table.selectionModel().selectionChanged.connect(lambda *_: self._update_buttons())
        self.table.clicked.connect(self._clicked)
        self.table.doubleClicked.connect(self._double_clicked)
        self.table.customContextMenuRequested.connect(self._menu)
        self._generation = 0
        self.live = LiveRows(self.model, self)  # running rows, live while the page is shown
        self.live.missing.connect(self.refresh)
        self.model.dataChanged.connect(self._row_moved)  # a running row changed, or ended
        self._update_buttons()

    def _row_moved(self) -> None:
        self._update_buttons()
        self._summarize()

    def follow(self, followed: Callable[[], Mapping[str, RunSource]]) -> None:
        """`followed()`: the runs this window follows, by their local folder (their rows are
        read from them, in memory)."""
        self.live.followed = followed

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.table.fit_columns()  # resized while hidden, its viewport's width was not known
        self.live.start()

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self.live.stop()

    # -- sections ------------------------------------------------------------------------------
    def add_section(self, widget: QWidget) -> None:
        """Another section of the page, above the list of runs (queued runs)."""
        self.sections.addWidget(widget)

    # -- loading -------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read the rows (off the UI thread), show them, then read what ended runs read for
        the first time still miss (steps, best validation value)."""
        self._generation += 1
        generation = self._generation
        run_in_thread(load_rows, lambda got: self._loaded(generation, *got),
                      self._failed, context=self)

    def _loaded(self, generation: int, rows: list[RunRow], watched: set[str],
                texts: list[str]) -> None:
        if generation != self._generation:
            return
        self.show_rows(rows, watched, texts)
        if any(not r.summarized and not r.active for r in rows):
            from dtgui.launch.run_admin import fill_rows

            # (the sweeps too: the best of their trials, once these are read)
            run_in_thread(lambda: fill_rows(rows), lambda _: self._filled(generation),
                          self._failed, context=self)

    def _filled(self, generation: int) -> None:
        if generation == self._generation and self.model.rows:
            # (steps and best values: nothing the filter reads changed)
            self.model.dataChanged.emit(self.model.index(0, 0), self.model.index(
                len(self.model.rows) - 1, len(COLUMNS) - 1))
            self.table.fit_columns()

    def _failed(self, exc: BaseException) -> None:
        self.summary.setText(f"The runs could not be read: {error_message(exc)}")

    def show_rows(self, rows: list[RunRow], watched: set[str] | None = None,
                  texts: list[str] | None = None) -> None:
        self.model.set_rows(rows, watched, texts)
        self.table.fit_columns()
        self._summarize()
        self._update_buttons()
        self.loaded.emit(rows)

    def _summarize(self) -> None:
        """The line above the list: how many runs train (and are followed here), ended,
        sweeps, archived."""
        rows = self.model.rows
        runs = [r for r in rows if r.kind != SWEEP]
        running = [r for r in runs if r.active]
        here = sum(1 for r in running if r.folder in self.live.followed())
        sweeps = sum(1 for r in rows if r.kind == SWEEP)
        archived = sum(1 for r in rows if r.archived)
        if not rows:
            self.summary.setText("No runs yet.")
            return
        follow = ("followed here" if here and here == len(running) else
                  "reattach to follow them" if not here else
                  f"{here} followed here; reattach to follow the others")
        text = (f"{len(running)} run(s) still training ({follow}), "
                f"{len(runs) - len(running)} ended")
        text += f", {sweeps} sweep(s)" if sweeps else ""
        text += f"; {archived} archived" if archived and not self.proxy.show_archived else ""
        self.summary.setText(text + ".")

    # -- the view ------------------------------------------------------------------------------
    def set_filter(self, text: str) -> None:
        self.proxy.set_text(text)
        self._update_buttons()

    def _show_archived(self, shown: bool) -> None:
        self.proxy.set_show_archived(shown)
        self._update_buttons()

    def row_count(self) -> int:
        """The rows shown (after the filter)."""
        return self.proxy.rowCount()

    def row_at(self, view_row: int) -> RunRow:
        return self.table.row_at(view_row)

    def cell_text(self, view_row: int, column: int) -> str:
        return str(self.proxy.index(view_row, column).data() or "")

    def select(self, *view_rows: int) -> None:
        from PySide6.QtCore import QItemSelectionModel

        selection = self.table.selectionModel()
        selection.clearSelection()
        flags = QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
        for row in view_rows:
            selection.select(self.proxy.index(row, 0), flags)

    def selected_rows(self) -> list[RunRow]:
        rows = sorted(i.row() for i in self.table.selectionModel().selectedRows())
        return [self.row_at(r) for r in rows if r < self.proxy.rowCount()]

    def selected(self) -> RunRow | None:
        """The one selected row (None when none or several are selected)."""
        chosen = self.selected_rows()
        return chosen[0] if len(chosen) == 1 else None

    def _update_buttons(self) -> None:
        self.buttons.enable_for(self.selected_rows())

    def _clicked(self, index: QModelIndex) -> None:
        row = self.row_at(index.row())
        if row.kind == SWEEP and index.column() == NAME:
            self.model.toggle(row)
            self.proxy.refilter()
            self.table.fit_columns()  # its trials' names

    def _double_clicked(self, index: QModelIndex) -> None:
        row = self.row_at(index.row())
        if index.column() == NOTE and not self.model.note_in_place(row):
            self.notes.edit_note(row)
        elif index.column() not in (TAGS, NOTE):
            self._activate(row)

    def _activate(self, row: RunRow) -> None:
        if row.kind == SWEEP:
            self.sweepRequested.emit(Path(row.folder))
        else:
            self._emit_records(self.reattachRequested if row.active else self.openRequested,
                               [row])

    def _open(self) -> None:
        row = self.selected()
        if row is not None:
            self._activate(row)

    def _menu(self, point: QPoint) -> None:
        index = self.table.indexAt(point)
        if not index.isValid():
            return
        if not self.table.selectionModel().isRowSelected(index.row(), QModelIndex()):
            self.select(index.row())
        row = self.row_at(index.row())
        chosen = self.selected_rows()
        menu = QMenu(self)
        if row.kind == SWEEP:
            menu.addAction("Open the sweep").triggered.connect(lambda: self._activate(row))
            menu.addAction("Show its trials" if row.folder not in self.model.expanded
                           else "Hide its trials").triggered.connect(
                lambda: self._clicked(self.proxy.index(index.row(), NAME)))
        elif row.active:
            menu.addAction("Reattach").triggered.connect(lambda: self._activate(row))
        else:
            menu.addAction("Open").triggered.connect(lambda: self._activate(row))
            if row.state == "finished":
                menu.addAction("Train longer…").triggered.connect(lambda: self._longer(row))
            else:
                menu.addAction("Resume").triggered.connect(
                    lambda: self.resumeRequested.emit(Path(row.folder), None))
        if len([r for r in chosen if r.kind != SWEEP]) >= 2:
            menu.addAction("Compare").triggered.connect(self._compare)
        if row.kind != SWEEP:
            menu.addAction("Clone into the wizard").triggered.connect(self._clone)
            menu.addAction("Export bundle…").triggered.connect(self.export_selected)
        menu.addAction("Open in TensorBoard").triggered.connect(
            lambda: self.tensorboardRequested.emit([Path(r.folder) for r in chosen or [row]]))
        menu.addAction("Open in MLflow").triggered.connect(
            lambda: self.mlflowOpenRequested.emit(Path(row.folder)))
        if any(r.kind != SWEEP for r in chosen or [row]):
            menu.addAction("Export to MLflow").triggered.connect(
                lambda: self._send_to_mlflow(chosen or [row]))
        menu.addSeparator()
        menu.addAction("Edit tags").triggered.connect(
            lambda: self.table.edit(self.proxy.index(index.row(), TAGS)))
        menu.addAction("Edit note…").triggered.connect(lambda: self.notes.edit_note(row))
        menu.addAction(self.buttons.archive_button.text()).triggered.connect(self._archive)
        if row.kind != SWEEP:
            menu.addAction("Delete…").triggered.connect(self.delete_selected)
        menu.popup(self.table.viewport().mapToGlobal(point))

    # -- actions -------------------------------------------------------------------------------
    def reattach_rows(self, rows: list[RunRow]) -> None:
        """Ask to reattach to each of these running rows (reattachRequested, one a row)."""
        for row in rows:
            self._emit_records(self.reattachRequested, [row])

    def open_rows(self, rows: list[RunRow]) -> None:
        """Ask to open each of these ended rows (openRequested, one a row)."""
        self._emit_records(self.openRequested, rows)

    def _emit_records(self, signal: SignalInstance, rows: list[RunRow] | None = None) -> None:
        """Emit the records of these rows (default: the one selected), read off the UI
        thread."""
        chosen = rows if rows is not None else [r for r in [self.selected()] if r is not None]
        chosen = [r for r in chosen if r.kind != SWEEP]
        def first(records: list[RunRecord]) -> None:
            if records:
                signal.emit(records[0])

        if chosen:
            run_in_thread(lambda: _records(chosen), first, self._failed, context=self)

    def _longer(self, row: RunRow) -> None:
        """A finished run trained on from its last checkpoint: to which step, asked."""
        done = row.steps or row.total_steps
        steps, ok = QInputDialog.getInt(
            self, "Train longer", f"{row.name} trained {done:,} steps. Train on from its last "
            "checkpoint to step:", max(done * 2, 1), done + 1, 2_000_000_000)
        if ok:
            self.resumeRequested.emit(Path(row.folder), steps)

    def _compare(self) -> None:
        chosen = [r for r in self.selected_rows() if r.kind != SWEEP]
        if len(chosen) >= 2:
            run_in_thread(lambda: _records(chosen), self.compareRequested.emit,
                          self._failed, context=self)

    def _send_to_mlflow(self, rows: list[RunRow]) -> None:
        chosen = [r for r in rows if r.kind != SWEEP]
        run_in_thread(lambda: _records(chosen), self.mlflowRequested.emit, self._failed,
                      context=self)

    def _clone(self) -> None:
        row = self.selected()
        if row is not None and row.kind != SWEEP:
            self.cloneRequested.emit(Path(row.folder))

    def _archive(self) -> None:
        self.notes.archive(self.selected_rows())
        self.proxy.refilter()
        self._update_buttons()

    def export_selected(self) -> None:
        row = self.selected()
        if row is not None and row.kind != SWEEP:
            self.export.export(row)

    def delete_selected(self) -> None:
        """Delete the selected run, asked first; refused while it trains."""
        row = self.selected()
        if row is not None and row.kind != SWEEP:
            self.deletion.delete(row)

    def _deleted(self, folder: str) -> None:
        self.model.remove({folder})
        self._update_buttons()

    def say(self, title: str, text: str) -> None:
        """Tell why something was not done: above the list and in a message (not waited
        for)."""
        self.summary.setText(text)
        box = QMessageBox(QMessageBox.Icon.Information, title, text, parent=self)
        box.setObjectName("runsMessage")
        box.open()
