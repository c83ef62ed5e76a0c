"""The sweep view: a sweep's trials, live, best first, with a parallel-coordinates plot and
the objective against each parameter (docs/sweeps.md).

`SweepView.open(folder)` shows the sweep its `SweepSession` follows (`dtgui.ui.sweep_session`:
the sweep read in the background, its changes told as signals); `start` starts a sweep's
process and shows it. The queue itself runs in that process, which goes on while dtgui is
closed (Stop asks it to stop; More trials… starts it again). The selected trials open in
Compare, the best one's run opens like any run, the table exports as CSV and the sweep as a
folder of bundles with a driver script (`dtgui.core.sweeps.sweep_export`).
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QMenu,
    QPushButton,
    QSplitter,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.plans.plan import Plan
from dtgui.core.runs.records import RunRecord
from dtgui.core.runs.run_index import significant
from dtgui.core.sweeps.sweep import SweepSpec
from dtgui.core.sweeps.sweep_study import (
    TRIALS_CSV,
    SweepTable,
    TrialRow,
    axis_ends,
    axis_values,
    csv_text,
    parallel_coordinates,
)
from dtgui.ui.pages.trials_table import TrialsTable
from dtgui.ui.plots.plot_base import series_colour
from dtgui.ui.sweep_session import SweepSession
from dtgui.ui.workers import Worker, create_worker, error_message

STATE_COLOURS = {"finished": "#2ca02c", "pruned": "#ff7f0e", "stopped": "#8c564b",
                 "failed": "#d62728",
                 "running": "#1f77b4", "waiting": "#7f7f7f"}
SEARCH_TEXT = {"tpe": "Bayesian search (TPE)", "random": "random search",
               "grid": "grid search (every combination)"}
_LOCAL_SLOT = re.compile(r"^local(?:-(?=\d)|(?=\s|$))")  # this machine's: local-1, local #1


def slot_text(name: str) -> str:
    """A trial's slot as the user knows it: "this machine #1" for local-1."""
    return _LOCAL_SLOT.sub(lambda m: "this machine " + ("#" if m.group(0) == "local-" else ""),
                           name).replace("  ", " ").strip()


def status_text(data: SweepTable, running: bool, in_process: bool = True) -> str:
    """The sweep in a sentence: its trials, its search and goal, its best trial and whether
    its queue runs (`in_process`: in a process of its own, else in the app)."""
    spec = data.spec
    counts = {s: sum(1 for r in data.rows if r.state == s)
              for s in ("finished", "pruned", "stopped", "failed")}
    training = sum(1 for r in data.rows if r.state == "running")
    # a trial still running is not done: counted apart, not among the trials asked for
    told = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none yet"
    best = data.best
    goal = "lowest" if spec.goal == "minimize" else "highest"
    return (f"{_counted(data) - training} of {spec.trials} trial(s) done"
            + (f", {training} running" if training else "") + f": {told}. "
            f"{SEARCH_TEXT.get(spec.search, spec.search)} for the {goal} {spec.objective}"
            + (f"; best: trial {best.number} ({significant(best.objective)})"
               if best is not None and best.objective is not None else "")
            + (". Running in the background: it goes on if dtgui is closed." if running
               and in_process else ". Running in dtgui: it stops when dtgui is closed."
               if running else "." if training  # its queue runs elsewhere (a shell)
               else ". Not running."))


def _trial_record(row: TrialRow) -> RunRecord | None:
    try:
        return RunRecord.load(Path(row.run)) if row.run else None
    except (OSError, ValueError):
        return None


def _counted(data: SweepTable) -> int:
    """The trials that count towards those asked: not those a stop ended (they run again
    when the sweep goes on)."""
    return sum(1 for r in data.rows if r.state != "stopped")


class SweepView(QWidget):
    compareRequested = Signal(list)  # list[RunRecord]: the selected trials' runs
    openRequested = Signal(object)  # RunRecord: the best trial's run
    mlflowRequested = Signal(object)  # Path: the sweep's folder, its trials in MLflow's UI
    tensorboardRequested = Signal(list)  # [Path]: the sweep's folder, in TensorBoard
    closed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.folder: Path | None = None
        self.table_data: SweepTable | None = None
        self.session = SweepSession(self)
        self.session.changed.connect(self.show_table)
        self.session.sweepEnded.connect(self._show_status)
        self.session.started.connect(lambda _pid: self._set_enabled())
        self.session.failed.connect(self._failed)
        self.title = QLabel("No sweep")
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.title.setWordWrap(True)  # a long name wraps: it never widens the window
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.notes = QLabel("")  # what the queue said: trials waiting for a GPU ...
        self.notes.setWordWrap(True)
        self.notes.setStyleSheet("color: #8a5a00")
        self.notes.hide()
        self.table = TrialsTable()
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.parallel = pg.PlotWidget(background="w")
        self.parallel.setMouseEnabled(False, False)
        self.parallel.hideButtons()
        self.scatter_tabs = QTabWidget()
        plots = QTabWidget()
        plots.addTab(self.parallel, "Parallel coordinates")
        plots.addTab(self.scatter_tabs, "Objective by parameter")
        self.compare_button = QPushButton("Compare")
        self.compare_button.setToolTip("Compare the selected trials' runs")
        self.compare_button.clicked.connect(self._compare)
        self.best_button = QPushButton("Best run")
        self.best_button.setToolTip("Open the best trial's run")
        self.best_button.clicked.connect(self._open_best)
        # One button for both exports: the row of buttons fits beside the machines column on
        # a 1366-px screen.
        self.export_button = QPushButton("Export")
        export_menu = QMenu(self.export_button)
        self.csv_action = export_menu.addAction("Trials as CSV…")
        self.csv_action.triggered.connect(self._export_csv)
        self.bundles_action = export_menu.addAction("Bundles and rerun.py…")
        self.bundles_action.setToolTip("Write every trial's bundle and rerun.py, which reruns "
                                       "the sweep's trials without dtgui")
        self.bundles_action.triggered.connect(self._export_bundles)
        export_menu.setToolTipsVisible(True)
        self.export_button.setMenu(export_menu)
        self.open_in_button = QPushButton("Open in")
        self.open_in_button.setToolTip("The sweep's trials in MLflow's UI or in TensorBoard "
                                       "(HParams)")
        open_menu = QMenu(self.open_in_button)
        open_menu.addAction("MLflow").triggered.connect(self._open_in_mlflow)
        open_menu.addAction("TensorBoard").triggered.connect(self._open_in_tensorboard)
        self.open_in_button.setMenu(open_menu)
        self.more_button = QPushButton("More trials…")
        self.more_button.setToolTip("Go on with this sweep (its study) up to more trials, in "
                                    "the background")
        self.more_button.clicked.connect(self._ask_more)
        self.stop_button = QPushButton("Stop sweep")
        self.stop_button.setToolTip("Stop the running trials and start no more")
        self.stop_button.clicked.connect(self.stop)
        back = QPushButton("Close")
        back.clicked.connect(self.closed)
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        for button in (self.best_button, self.compare_button, self.open_in_button,
                       self.export_button, self.more_button, self.stop_button, back):
            top.addWidget(button)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.table)
        splitter.addWidget(plots)
        splitter.setSizes([400, 400])
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.status)
        layout.addWidget(self.notes)
        layout.addWidget(splitter, 1)
        self._set_enabled()

    @property
    def process(self) -> int | None:
        """The pid of the sweep's process while it runs."""
        return self.session.process

    # -- reading ---------------------------------------------------------------------------
    def open(self, folder: Path) -> None:
        """Show the sweep in `folder` (followed by the session while its queue runs)."""
        self._show_folder(folder, "Reading the sweep…")
        self.session.follow(self.folder or Path(folder))

    def start(self, folder: Path, spec: SweepSpec, plan: Plan) -> None:
        """Start a new sweep in its own process and show it."""
        self._show_folder(folder, f"Starting the sweep in {folder}…")
        self.session.start(Path(folder), spec, plan)

    def _show_folder(self, folder: Path, status: str) -> None:
        self.folder = Path(folder)
        self.table_data = None
        # its name: a folder's path has no space to wrap at, and would widen the window
        self.title.setText(f"Sweep {self.folder.name}")
        self.title.setToolTip(str(self.folder))
        self.status.setText(status)
        self._set_enabled()

    def _failed(self, text: str) -> None:
        self.status.setText(text)
        self._set_enabled()

    def show_table(self, data: SweepTable) -> None:
        if self.folder is None or data.folder != self.folder:
            return
        selected = self._selected_numbers()
        self.table_data = data
        self.notes.setText("\n".join(data.notes[-3:]))
        self.notes.setVisible(bool(data.notes))
        self._fill_table(data, selected)
        self._draw_parallel(data)
        self._draw_scatters(data)
        self._show_status()

    def _show_status(self) -> None:
        """What the sweep is now (once read; before, what is being done stays)."""
        if self.table_data is not None:
            self.status.setText(status_text(self.table_data, self.session.running,
                                            self.process is not None))
            self.status.setToolTip(f"The sweep's process: {self.process}"
                                   if self.process else "")
        self._set_enabled()

    # -- the table -------------------------------------------------------------------------
    def _fill_table(self, data: SweepTable, selected: set[int]) -> None:
        names = [p.name for p in data.spec.params]
        # a trial's value is its best one (at "best step"), not its last
        headers = ["trial", "state", f"best {data.spec.objective}", "best step", *names, "time",
                   "machine", "error"]
        self.table.blockSignals(True)
        self.table.setColumnCount(len(headers))
        self.table.setHorizontalHeaderLabels(headers)
        self.table.setRowCount(len(data.rows))
        for i, row in enumerate(data.rows):
            cells = [str(row.number), row.state_text,
                     significant(row.objective),
                     "" if row.best_step is None else str(row.best_step),
                     *(_value_text(row.params.get(n)) for n in names),
                     "" if row.seconds is None else f"{row.seconds:.0f} s",
                     slot_text(row.machine), row.error_text]
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(Qt.ItemDataRole.UserRole, row.number)
                if j == 1:
                    item.setForeground(pg.mkColor(STATE_COLOURS.get(row.state, "#000")))
                if j == len(cells) - 1 and row.error:
                    item.setToolTip(row.error_text)
                self.table.setItem(i, j, item)
            if row.number in selected:
                self.table.selectRow(i)
        self.table.blockSignals(False)
        self.table.fit_columns()

    def _selected_numbers(self) -> set[int]:
        out = set()
        for index in self.table.selectionModel().selectedRows():
            item = self.table.item(index.row(), 0)
            if item is not None:
                out.add(int(item.data(Qt.ItemDataRole.UserRole)))
        return out

    def selected_rows(self) -> list[TrialRow]:
        if self.table_data is None:
            return []
        numbers = self._selected_numbers()
        return [r for r in self.table_data.rows if r.number in numbers]

    def _selection_changed(self) -> None:
        self._set_enabled()

    def _set_enabled(self) -> None:
        data = self.table_data
        self.compare_button.setEnabled(len([r for r in self.selected_rows() if r.run]) >= 1)
        self.best_button.setEnabled(data is not None and data.best is not None)
        self.export_button.setEnabled(data is not None and bool(data.rows))
        self.stop_button.setEnabled(self.session.running)
        self.more_button.setEnabled(data is not None and not self.session.running
                                    and not self.session.following)

    def _ask_more(self) -> None:
        data = self.table_data
        if data is None:
            return
        asked = data.spec.trials
        if _counted(data) < asked:  # stopped trials are owed: going on runs them again first
            least, default = asked, asked
        else:
            least = asked + 1
            default = least + 3
        trials, ok = QInputDialog.getInt(self, "More trials", "Trials in all:", default,
                                         least, 100_000)
        if ok:
            self.more(trials)

    def more(self, trials: int) -> None:
        """Go on with the sweep up to `trials` in all, in its own process again."""
        if self.folder is None:
            return
        self.more_button.setEnabled(False)
        self.status.setText(f"Going on with the sweep up to {trials} trials…")
        self.session.resume(trials)

    def stop(self) -> None:
        """Ask the sweep's queue to stop (in the background)."""
        if self.folder is None:
            return
        self.stop_button.setEnabled(False)
        self.status.setText("Stopping the sweep…")
        self.session.stop()

    # -- the plots -------------------------------------------------------------------------
    def _draw_parallel(self, data: SweepTable) -> None:
        plot = self.parallel
        plot.clear()
        axes, lines = parallel_coordinates(data.rows, data.spec.params)
        best = data.best
        for row, line in zip(data.rows, lines, strict=True):
            xs = [float(i) for i, v in enumerate(line) if v is not None]
            ys = [float(v) for v in line if v is not None]
            if len(xs) < 2:
                continue
            if best is not None and row.number == best.number:
                pen = pg.mkPen("#111111", width=3)
            elif row.state in ("failed", "stopped"):  # it has no objective: a faint line
                pen = pg.mkPen("#bbbbbb", width=1, style=Qt.PenStyle.DashLine)
            else:
                pen = pg.mkPen(STATE_COLOURS.get(row.state, "#7f7f7f"), width=1.2)
            plot.plot(xs, ys, pen=pen)
        axis = plot.getAxis("bottom")
        axis.setTicks([list(enumerate([*axes[:-1], data.spec.objective]))])
        plot.getAxis("left").setTicks([[(0.0, "low"), (1.0, "high")]])
        for i, (low, high) in enumerate(axis_ends(data.rows, data.spec.params)):
            for text, y, anchor in ((high, 1.0, (0.5, 1.1)), (low, 0.0, (0.5, -0.1))):
                label = pg.TextItem(text, color="#333333", anchor=anchor)
                label.setPos(float(i), y)
                plot.addItem(label)
        plot.setXRange(-0.2, max(1, len(axes) - 1) + 0.2)
        plot.setYRange(-0.12, 1.12)

    def _draw_scatters(self, data: SweepTable) -> None:
        tabs = self.scatter_tabs
        current = tabs.currentIndex()
        while tabs.count():
            widget = tabs.widget(0)
            tabs.removeTab(0)
            if widget is not None:
                widget.deleteLater()
        with_value = [r for r in data.rows if r.objective is not None]
        for k, param in enumerate(data.spec.params):
            plot = pg.PlotWidget(background="w")
            plot.setLabel("left", data.spec.objective)
            plot.setLabel("bottom", param.name)
            for side in ("left", "bottom"):  # the values as the table shows them, unscaled
                plot.getAxis(side).enableAutoSIPrefix(False)
            xs = axis_values(with_value, param)
            points = [(x, r.objective) for x, r in zip(xs, with_value, strict=True)
                      if x is not None and r.objective is not None]
            log = param.space.kind.is_log
            if log:
                points = [(math.log10(x), y) for x, y in points if x > 0]
                plot.getAxis("bottom").setTicks(_log_ticks(param.space.low, param.space.high))
            if param.space.kind.value == "choice" and not all(
                    isinstance(v, (int, float)) for v in param.space.values):
                plot.getAxis("bottom").setTicks(
                    [[(float(i), str(v)) for i, v in enumerate(param.space.values)]])
            if points:
                brushes = [pg.mkBrush(STATE_COLOURS.get(r.state, "#7f7f7f"))
                           for r, x in zip(with_value, xs, strict=True)
                           if x is not None and (not log or x > 0)]
                plot.addItem(pg.ScatterPlotItem(
                    [p[0] for p in points], [p[1] for p in points], size=9, brush=brushes,
                    pen=pg.mkPen(series_colour(k))))
            tabs.addTab(plot, param.name)
        if 0 <= current < tabs.count():
            tabs.setCurrentIndex(current)

    # -- actions ---------------------------------------------------------------------------
    def _open_in_mlflow(self) -> None:
        if self.folder is not None:
            self.mlflowRequested.emit(self.folder)

    def _open_in_tensorboard(self) -> None:
        if self.folder is not None:
            self.tensorboardRequested.emit([self.folder])

    def _compare(self) -> None:
        # a stopped trial and the trial that continues it share one run: compared once
        runs = {r.run: r for r in self.selected_rows() if r.run}
        records = [rec for rec in map(_trial_record, runs.values()) if rec is not None]
        if records:
            self.compareRequested.emit(records)

    def _open_best(self) -> None:
        data = self.table_data
        if data is None or data.best is None:
            return
        record = _trial_record(data.best)
        if record is not None:
            self.openRequested.emit(record)

    def _export_csv(self) -> None:
        data = self.table_data
        if data is None:
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export the sweep's trials",
                                              str(data.folder / TRIALS_CSV), "CSV (*.csv)")
        if path:
            self.export_csv(Path(path))

    def export_csv(self, path: Path) -> None:
        """Write the table as shown (in the background)."""
        data = self.table_data
        if data is None:
            return
        text = csv_text(data.rows, data.spec.params, data.spec.objective)

        def write(_w: Worker[Path]) -> Path:
            tmp = path.with_suffix(path.suffix + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            shutil.move(str(tmp), str(path))
            return path

        create_worker(write, on_done=lambda p: self.status.setText(f"Wrote {p}"),
                      on_error=lambda exc: self.status.setText(
                          f"The CSV could not be written: {error_message(exc)}"),
                      context=self)

    def _export_bundles(self) -> None:
        if self.folder is None:
            return
        chosen = QFileDialog.getExistingDirectory(self, "Export the sweep's bundles into (a new "
                                                  "or empty folder)", str(self.folder.parent))
        if chosen:
            self.export_bundles(Path(chosen))

    def export_bundles(self, destination: Path) -> None:
        """Write the sweep as a folder of bundles plus rerun.py (in the background)."""
        from dtgui.core.sweeps.sweep_export import RERUN_SCRIPT, export_sweep

        folder = self.folder
        if folder is None:
            return
        self.status.setText(f"Writing the trials' bundles to {destination}…")
        create_worker(lambda _w: export_sweep(folder, destination),
                      on_done=lambda bundles: self.status.setText(
                          f"Wrote {len(bundles)} bundle(s) to {destination}; rerun them "
                          f"without dtgui: python3 {destination / RERUN_SCRIPT}"),
                      on_error=lambda exc: self.status.setText(
                          f"The sweep could not be exported: {error_message(exc)}"),
                      context=self)


def _log_ticks(low: float, high: float) -> list[list[tuple[float, str]]]:
    """Ticks at 1, 2 and 5 of each decade from `low` to `high` (the x is log10 of the
    value): pyqtgraph's own log ticks label every minor step, and they overlap."""
    ticks = []
    for decade in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1):
        for step in (1, 2, 5):
            value = step * 10.0 ** decade
            if low / 1.5 <= value <= high * 1.5:
                ticks.append((math.log10(value), f"{value:g}"))
    return [ticks]


def _value_text(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)
