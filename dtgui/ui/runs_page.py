"""The Runs page: runs still training (reattach) and the history (open).

The list comes from the run records under the runs directory (`RunHistory`), read off the UI
thread. "Reattach" follows a running run again - also one that kept training while dtgui
was closed, or that ended meanwhile: every event is read again from the start. "Open" shows
an ended run's curves and logs from its local bundle.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal, SignalInstance
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.plan import Plan
from dtgui.core.runs import RunHistory, RunRecord
from dtgui.core.strategies import STRATEGIES
from dtgui.ui.workers import run_in_thread

COLUMNS = ("Run", "Strategy", "Machines", "State", "Final loss", "Started", "Ended")


def _when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp)) if stamp else ""


def plan_summary(record: RunRecord) -> str:
    """One line about a run's plan (read from its bundle: call it off the UI thread)."""
    return run_texts(record)[0]


def run_texts(record: RunRecord) -> tuple[str, str]:
    """(the plan's summary, what the run trained: "" for dtgui's loop, "script main.py ·
    tf_keras" for a user's script), read from its bundle: call it off the UI thread."""
    from dtgui.core.bundle import Bundle
    from dtgui.core.plan_text import script_summary

    try:
        plan = Bundle.open(Path(record.bundle)).plan
    except Exception:  # noqa: BLE001 - a damaged bundle still lists
        return record.bundle, ""
    return _summary(record, plan), script_summary(plan)


def _summary(record: RunRecord, plan: Plan) -> str:
    info = STRATEGIES.get(plan.strategy)
    where = ", ".join(f"{t.task_id}@{t.machine_name}" for t in plan.tasks)
    if plan.script is not None:  # its own steps and options: not the plan's defaults
        from dtgui.core.plan_text import script_summary, script_text

        return (f"{info.title if info else plan.strategy}: your {script_summary(plan)}; "
                f"{where}\n{script_text(plan, indent='')}\n{record.bundle}")
    return (f"{info.title if info else plan.strategy}: {plan.total_replicas} replica(s), "
            f"{plan.steps} steps, global batch {plan.global_batch}, {plan.precision}; "
            f"{where}\n{record.bundle}")


def _history() -> list[tuple[RunRecord, str, bool, str]]:
    """(record, plan summary, watched, what it trained) per run: `watched` when a run still
    training has its headless watcher (dtgui closed with Keep training); what it trained:
    a user's script in a few words ("" for dtgui's loop)."""
    from dtgui.launch.watcher import watcher_pid

    rows = []
    for record in RunHistory().records():
        summary, trained = run_texts(record)
        rows.append((record, summary, record.is_active and watcher_pid(record) is not None,
                     trained))
    return rows


UNWATCHED_TIP = ("Nobody watches this run: if a task fails, nothing stops the others. "
                 "Reattach to watch it.")
WATCHED_TIP = ("dtgui's watcher applies the run's failure policy while dtgui is closed; "
               "Reattach takes the run back from it.")


class RunsPage(QWidget):
    reattachRequested = Signal(object)  # RunRecord
    openRequested = Signal(object)  # RunRecord
    compareRequested = Signal(list)  # the RunRecords selected
    loaded = Signal(list)  # the records just shown

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("runsPage")
        self.records: list[RunRecord] = []
        title = QLabel("Runs")
        title.setObjectName("pageTitle")
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("runsTable")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        # several rows (ctrl/shift-click) for Compare; Reattach and Open take one
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.refresh_button = QPushButton("Refresh")
        self.reattach_button = QPushButton("Reattach")
        self.reattach_button.setObjectName("primaryButton")
        self.reattach_button.setToolTip("Follow this run again: its curves, logs and tasks, "
                                        "including what happened while dtgui was closed.")
        self.open_button = QPushButton("Open")
        self.open_button.setToolTip("Show this run's curves and logs from its bundle.")
        self.compare_button = QPushButton("Compare")
        self.compare_button.setObjectName("compareButton")
        self.compare_button.setToolTip("Select several runs (Ctrl- or Shift-click), then "
                                       "compare their loss curves, settings and results.")
        buttons = QHBoxLayout()
        for button in (self.reattach_button, self.open_button, self.compare_button,
                       self.refresh_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(24, 20, 24, 20)
        layout.addWidget(title)
        layout.addWidget(self.summary)
        layout.addWidget(self.table, 1)
        layout.addLayout(buttons)
        self.refresh_button.clicked.connect(self.refresh)
        self.reattach_button.clicked.connect(lambda: self._emit(self.reattachRequested))
        self.open_button.clicked.connect(lambda: self._emit(self.openRequested))
        self.compare_button.clicked.connect(self._compare)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.table.itemDoubleClicked.connect(lambda _item: self._activate())
        self._update_buttons()

    def refresh(self) -> None:
        """Read the run records (off the UI thread), then show them."""
        run_in_thread(_history, self.show_records, context=self)

    def show_records(self, rows: list[Any]) -> None:
        """Show runs: records, or (record, plan summary) pairs."""
        rows = [r if isinstance(r, tuple) else (r, r.bundle) for r in rows]
        self.records = [r[0] for r in rows]
        summaries = [r[1] for r in rows]
        watched = [len(r) > 2 and bool(r[2]) for r in rows]
        trained = [str(r[3]) if len(r) > 3 else "" for r in rows]  # a user's script
        self.table.setRowCount(len(self.records))
        for row, r in enumerate(self.records):
            info = STRATEGIES.get(r.strategy)
            machines = ", ".join(m.name for m in r.machines) or "local"
            # significant digits, as the dashboard says it (a small loss is not 0.0000)
            loss = f"{r.final_loss:.4g}" if r.final_loss is not None else ""
            state = str(r.state)
            if r.is_active:
                state += " · watched" if watched[row] else " · not watched"
            strategy = info.title if info else r.strategy
            values = (r.run_name, f"{strategy} · {trained[row]}" if trained[row] else strategy,
                      machines,
                      state, loss, _when(r.created), _when(r.ended))
            for col, value in enumerate(values):
                item = QTableWidgetItem(value)
                tip = r.message if col == 3 and r.message else summaries[row]
                if col == 3 and r.is_active:
                    tip = WATCHED_TIP if watched[row] else UNWATCHED_TIP
                item.setToolTip(tip)
                if col == 4:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(row, col, item)
        running = sum(1 for r in self.records if r.is_active)
        self.summary.setText(f"{running} run(s) still training (reattach to follow them), "
                             f"{len(self.records) - running} ended." if self.records
                             else "No runs yet.")
        self._update_buttons()
        self.loaded.emit(self.records)

    def selected(self) -> RunRecord | None:
        """The one selected run (None when none or several are selected)."""
        chosen = self.selected_records()
        return chosen[0] if len(chosen) == 1 else None

    def selected_records(self) -> list[RunRecord]:
        rows = sorted(i.row() for i in self.table.selectionModel().selectedRows())
        return [self.records[r] for r in rows if r < len(self.records)]

    def _update_buttons(self) -> None:
        record = self.selected()
        self.reattach_button.setEnabled(record is not None and record.is_active)
        self.open_button.setEnabled(record is not None and not record.is_active)
        self.compare_button.setEnabled(len(self.selected_records()) >= 2)

    def _compare(self) -> None:
        chosen = self.selected_records()
        if len(chosen) >= 2:
            self.compareRequested.emit(chosen)

    def _emit(self, signal: SignalInstance) -> None:
        record = self.selected()
        if record is not None:
            signal.emit(record)

    def _activate(self) -> None:
        record = self.selected()
        if record is not None:
            (self.reattachRequested if record.is_active else self.openRequested).emit(record)
