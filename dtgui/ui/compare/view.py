"""Compare runs: the chosen runs' loss curves overlaid, and their plans side by side.

`CompareView.load(records)` reads the runs in a background worker (`dtgui.core.runs.compare`
does the reading and the numbers) and then shows, per run, the mean training loss (solid)
and the validation loss (dashed, same colour) by step or by wall time (a toggle), and a table
with one column per run. The table exports as CSV and the plot as PNG; both files are written
off the UI thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import QStandardPaths, Qt, Signal
from PySide6.QtGui import QColor, QImage, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QCheckBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSlider,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.runs.compare import (
    FIELD_MEANINGS,
    FIELDS,
    RunSummary,
    summarize_run,
    summary_csv,
    table_rows,
)
from dtgui.core.runs.records import RunRecord
from dtgui.core.series import Curve
from dtgui.core.smoothing import ema
from dtgui.ui.plots.plot_base import (
    DARK,
    LIGHT,
    ElapsedAxis,
    make_card,
    series_colour,
    swatch_icon,
    title_label,
)
from dtgui.ui.workers import Worker, create_worker, error_message, run_in_thread

PNG_WIDTH = 1600  # pixels of an exported plot
DEFAULT_SMOOTHING = 0.6  # as the dashboard's (TensorBoard's default too)
RAW_ALPHA = 60
SHOWN_FIELDS = FIELDS[1:]  # the run's name heads its column
LIMIT_FIELD = "Limited by"  # memory near its limit, else where the time went (bottleneck)


def _read_runs(records: Sequence[RunRecord]) -> Callable[[Worker[list[RunSummary]]],
                                                         list[RunSummary]]:
    def read(worker: Worker[list[RunSummary]]) -> list[RunSummary]:
        out = []
        for i, record in enumerate(records):
            worker.report(f"Reading {record.run_name} ({i + 1} of {len(records)})")
            out.append(summarize_run(record.bundle, record.run_name, record.state))
        return out

    return read


def _write_text(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _write_image(path: Path, image: QImage) -> Path:
    if path.suffix.lower() != ".png":
        path = path.with_name(path.name + ".png")  # the format follows the name
    if not image.save(str(path)):
        raise OSError(f"could not write {path}")
    return path


def _card(panel: str, title: str, note: QLabel | None, tools: Sequence[QWidget],
          body: QWidget) -> QFrame:
    """A card: a header (its title, `note` in the spare width, its tools) above `body`."""
    card = make_card(panel)
    layout = QVBoxLayout(card)
    layout.setContentsMargins(10, 6, 10, 10)
    header = QHBoxLayout()
    header.addWidget(title_label(title))
    if note is None:
        header.addStretch(1)
    else:
        header.addWidget(note, 1)
    for widget in tools:
        header.addWidget(widget)
    layout.addLayout(header)
    layout.addWidget(body, 1)
    return card


class ComparePlot(QWidget):
    """The loss curves of several runs on one plot, by step or by wall time."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.axis_mode = "step"
        self.weight = DEFAULT_SMOOTHING
        self.summaries: list[RunSummary] = []
        dark = self.palette().color(QPalette.ColorRole.Window).lightness() < 128
        self.theme = DARK if dark else LIGHT  # as the dashboard's plots
        self.plot_widget = pg.PlotWidget(background=self.theme.background)
        self.plot_widget.setObjectName("comparePlot")
        self.plot: pg.PlotItem = self.plot_widget.getPlotItem()
        self.plot.showGrid(x=True, y=True, alpha=self.theme.grid_alpha)
        self._label("left", "loss")
        self.plot.getAxis("left").setPen(pg.mkPen(self.theme.axis))
        self.plot.getAxis("left").setTextPen(pg.mkPen(self.theme.text))
        self.plot.setDownsampling(auto=True, mode="peak")
        self.plot.setClipToView(True)
        self.legend = self.plot.addLegend(offset=(-12, 8), labelTextSize="8pt",
                                          labelTextColor=self.theme.text,
                                          brush=pg.mkBrush(self.theme.legend_fill),
                                          pen=pg.mkPen(self.theme.legend_border))
        self.legend.setVisible(False)  # until it has a curve to name
        # (run, "train" | "raw" | "val"): smoothed training loss, its raw points, validation
        self.curves: dict[tuple[str, str], pg.PlotDataItem] = {}
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot_widget)
        self._set_bottom_axis()

    def _set_bottom_axis(self) -> None:
        axis = ElapsedAxis("bottom") if self.axis_mode == "time" else pg.AxisItem("bottom")
        axis.setPen(pg.mkPen(self.theme.axis))
        axis.setTextPen(pg.mkPen(self.theme.text))
        self.plot.setAxisItems({"bottom": axis})
        self._label("bottom", "wall time (since the run's start)"
                    if self.axis_mode == "time" else "step")

    def _label(self, name: str, text: str) -> None:
        self.plot.setLabel(name, text, color=self.theme.text, **{"font-size": "9pt"})

    def set_axis_mode(self, mode: str) -> None:
        """'step' or 'time' (seconds since each run's first event)."""
        if mode == self.axis_mode:
            return
        self.axis_mode = mode
        self._set_bottom_axis()
        self._draw()

    def set_log_y(self, on: bool) -> None:
        self.plot.setLogMode(y=on)
        self.plot.enableAutoRange()

    def set_smoothing(self, weight: float) -> None:
        if weight != self.weight:
            self.weight = weight
            self._draw()

    def set_runs(self, summaries: list[RunSummary]) -> None:
        self.summaries = summaries
        self._draw()

    def _x(self, curve: Curve) -> object:
        return curve.seconds if self.axis_mode == "time" else curve.steps

    def _draw(self) -> None:
        for item in self.curves.values():
            self.plot.removeItem(item)
        self.curves.clear()
        self.legend.clear()
        for index, s in enumerate(self.summaries):
            colour = series_colour(index)
            if len(s.loss):
                x = self._x(s.loss)
                if self.weight > 0:
                    faint = QColor(colour)
                    faint.setAlpha(RAW_ALPHA)
                    raw = pg.PlotDataItem(x, s.loss.values, pen=pg.mkPen(faint, width=1),
                                          skipFiniteCheck=True)
                    raw.setZValue(-5)
                    self.plot.addItem(raw)
                    self.curves[(s.name, "raw")] = raw
                item = pg.PlotDataItem(x, ema(s.loss.values, self.weight),
                                       pen=pg.mkPen(colour, width=1.5), name=s.name,
                                       skipFiniteCheck=True)
                self.plot.addItem(item)
                self.curves[(s.name, "train")] = item
            val = s.validation.get("loss")
            if val is not None and len(val):
                pen = pg.mkPen(colour, width=2.5, style=Qt.PenStyle.DashLine)
                item = pg.PlotDataItem(self._x(val), val.values, pen=pen,
                                       symbol="o", symbolSize=5, symbolPen=pen,
                                       symbolBrush=pg.mkBrush(colour),
                                       name=f"{s.name} (validation)")
                self.plot.addItem(item)
                self.curves[(s.name, "val")] = item
        self.legend.setVisible(bool(self.legend.items))  # no empty box before any curve
        self.plot.enableAutoRange()

    def image(self) -> QImage:
        """The plot (axes and legend) as an image, rendered at PNG_WIDTH pixels wide."""
        from pyqtgraph.exporters import ImageExporter

        exporter = ImageExporter(self.plot)
        exporter.parameters()["width"] = PNG_WIDTH
        exporter.parameters()["background"] = QColor(self.theme.background)
        image = exporter.export(toBytes=True)
        assert isinstance(image, QImage)
        return image


class CompareView(QWidget):
    """Several finished runs side by side: curves, settings and results."""

    closed = Signal()  # "Back to runs"
    loaded = Signal(list)  # the summaries shown
    exported = Signal(str)  # the path of a file written

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("compareView")
        self.summaries: list[RunSummary] = []
        self._worker: Worker[list[RunSummary]] | None = None
        title = QLabel("Compare runs")
        title.setObjectName("pageTitle")
        self.status = QLabel("")
        self.status.setObjectName("muted")
        self.status.setWordWrap(True)  # a long message wraps: it never widens the window
        self.back_button = QPushButton("\u2190 Runs")
        self.back_button.setToolTip("Back to the list of runs")
        self.back_button.clicked.connect(self.closed.emit)
        top = QHBoxLayout()
        top.addWidget(self.back_button)
        top.addWidget(title)
        top.addWidget(self.status, 1)

        self.plot = ComparePlot()
        self.by_step = QToolButton()
        self.by_time = QToolButton()
        group = QButtonGroup(self)
        for button, mode, text, tip in (
                (self.by_step, "step", "by step", "Training step on the x axis"),
                (self.by_time, "time", "by wall time",
                 "Time since each run's first event on the x axis")):
            button.setObjectName("compareAxis")
            button.setText(text)
            button.setToolTip(tip)
            button.setCheckable(True)
            button.setAutoRaise(True)
            button.clicked.connect(lambda _=False, m=mode: self.set_axis_mode(m))
            group.addButton(button)
        self.by_step.setChecked(True)
        self.log_check = QCheckBox("log scale")
        self.log_check.toggled.connect(self.plot.set_log_y)
        self.smoothing = QSlider(Qt.Orientation.Horizontal)
        self.smoothing.setObjectName("compareSmoothing")
        self.smoothing.setRange(0, 999)
        self.smoothing.setValue(round(DEFAULT_SMOOTHING * 1000))
        self.smoothing.setFixedWidth(110)
        self.smoothing.setToolTip("Exponential moving average of the training loss, as "
                                  "TensorBoard's (0: off); the raw points stay faint behind")
        self.smoothing_label = QLabel(f"smoothing {DEFAULT_SMOOTHING:.2f}")
        self.smoothing.valueChanged.connect(self._smoothing_moved)
        self.png_button = QPushButton("Save plot as PNG…")
        self.png_button.clicked.connect(lambda: self.export_png())
        legend_text = QLabel("solid: mean training loss over every replica · dashed: "
                             "validation loss")
        legend_text.setObjectName("muted")
        legend_text.setWordWrap(True)  # in the width the tools leave, on a 1366-px screen too
        plot_card = _card("compare", "Loss", legend_text,
                          (self.smoothing_label, self.smoothing, self.by_step, self.by_time,
                           self.log_check, self.png_button), self.plot)

        self.table = QTableWidget(len(SHOWN_FIELDS), 0)
        self.table.setObjectName("compareTable")
        self.table.setVerticalHeaderLabels(list(SHOWN_FIELDS))
        for row, name in enumerate(SHOWN_FIELDS):  # what each row means, on hover
            head = self.table.verticalHeaderItem(row)
            if head is not None:
                head.setToolTip(FIELD_MEANINGS.get(name, ""))
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ContiguousSelection)
        self.table.setWordWrap(False)
        self.table.horizontalHeader().setSectionResizeMode(
            QHeaderView.ResizeMode.ResizeToContents)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        self.csv_button = QPushButton("Export table as CSV…")
        self.csv_button.clicked.connect(lambda: self.export_csv())
        table_card = _card("compareTable", "Settings and results", None, (self.csv_button,),
                           self.table)

        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(plot_card)
        splitter.addWidget(table_card)
        splitter.setStretchFactor(0, 1)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([500, 420])  # every row of the table shows at 1000 px high
        splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(16, 12, 16, 12)
        layout.addLayout(top)
        layout.addWidget(splitter, 1)
        self._set_exports_enabled(False)

    # -- loading -------------------------------------------------------------------------------
    def load(self, records: Sequence[RunRecord]) -> None:
        """Read `records`' bundles in the background, then show them."""
        if self._worker is not None:
            self._worker.cancel()
        self._set_exports_enabled(False)
        self.status.setText(f"Reading {len(records)} run(s)…")
        self._worker = create_worker(_read_runs(list(records)), on_done=self.show_summaries,
                                     on_error=self._failed, on_progress=self.status.setText,
                                     context=self)

    def show_summaries(self, summaries: list[RunSummary]) -> None:
        self._worker = None
        self.summaries = list(summaries)
        self.plot.set_runs(self.summaries)
        self._fill_table()
        unreadable = [s.name for s in self.summaries if s.error]
        text = f"{len(self.summaries)} run(s): " + ", ".join(s.name for s in self.summaries)
        if unreadable:
            text += f" (could not read {', '.join(unreadable)})"
        self.status.setText(text)
        self._set_exports_enabled(bool(self.summaries))
        self.loaded.emit(self.summaries)

    def _failed(self, exc: BaseException) -> None:
        self._worker = None
        self.status.setText(f"Could not read the runs: {error_message(exc)}")

    def _fill_table(self) -> None:
        rows = table_rows(self.summaries)
        self.table.setColumnCount(len(rows))
        for col, (summary, values) in enumerate(zip(self.summaries, rows, strict=True)):
            head = QTableWidgetItem(summary.name)
            head.setIcon(swatch_icon(series_colour(col)))
            head.setToolTip(summary.bundle)
            self.table.setHorizontalHeaderItem(col, head)
            for row, value in enumerate(values[1:]):
                self.table.setItem(row, col, QTableWidgetItem(value))
            limit = self.table.item(self.row_of(LIMIT_FIELD), col)
            if limit is not None and summary.limit.known:  # the figure and the advice
                limit.setToolTip(summary.limit.text)
        self.table.resizeColumnsToContents()

    def row_of(self, field: str) -> int:
        """The table row of one of FIELDS (the run's name is the column's header)."""
        return SHOWN_FIELDS.index(field)

    # -- axis ----------------------------------------------------------------------------------
    def _smoothing_moved(self, value: int) -> None:
        weight = value / 1000
        self.smoothing_label.setText(f"smoothing {weight:.2f}")
        self.plot.set_smoothing(weight)

    def set_axis_mode(self, mode: str) -> None:
        (self.by_time if mode == "time" else self.by_step).setChecked(True)
        self.plot.set_axis_mode(mode)

    # -- export --------------------------------------------------------------------------------
    def _set_exports_enabled(self, on: bool) -> None:
        self.csv_button.setEnabled(on)
        self.png_button.setEnabled(on)

    def ask_save_path(self, title: str, name: str, filters: str) -> Path | None:
        """A save dialog (tests replace it); None when cancelled."""
        folder = QStandardPaths.writableLocation(
            QStandardPaths.StandardLocation.DocumentsLocation) or str(Path.home())
        path, _ = QFileDialog.getSaveFileName(self, title, str(Path(folder) / name), filters)
        return Path(path) if path else None

    def _default_name(self, ext: str) -> str:
        return f"dtgui-compare-{time.strftime('%Y%m%d-%H%M%S')}.{ext}"

    def csv_text(self) -> str:
        return summary_csv(self.summaries)

    def export_csv(self, path: Path | None = None) -> None:
        path = path or self.ask_save_path("Export the table as CSV", self._default_name("csv"),
                                          "CSV files (*.csv)")
        if path is None:
            return
        run_in_thread(lambda: _write_text(path, self.csv_text()), self._written,
                      self._write_failed, context=self)

    def export_png(self, path: Path | None = None) -> None:
        path = path or self.ask_save_path("Save the plot as PNG", self._default_name("png"),
                                          "PNG images (*.png)")
        if path is None:
            return
        image = self.plot.image()  # rendered here (Qt paints on the UI thread), saved there
        run_in_thread(lambda: _write_image(path, image), self._written, self._write_failed,
                      context=self)

    def _written(self, path: Path) -> None:
        self.status.setText(f"Wrote {path}")
        self.exported.emit(str(path))

    def _write_failed(self, exc: BaseException) -> None:
        self.status.setText(f"Could not write the file: {error_message(exc)}")
