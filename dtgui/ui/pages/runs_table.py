"""The Runs page's table: whole rows selected (several for Compare), tags and notes typed in
their cells, sorted by the model (`RunsModel.sort`), and columns that fill its width.

Its columns are sized by the space there is, not by measuring every cell of 10,000 rows:
each is as wide as its title and the texts of its first rows shown (at least its sample's
width); a wider table gives what is left to names, tags and notes, a narrower one takes it
back from notes first, names last (down to their samples' width), never from states: names
are read whole whenever there is room for them, a state always.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QStyle, QTableView, QWidget

from dtgui.core.runs.run_index import RunRow
from dtgui.ui.pages.runs_model import (
    BEST_VAL,
    COLUMNS,
    DURATION,
    FINAL_LOSS,
    NAME,
    NOTE,
    STARTED,
    STATE,
    STEPS,
    STRATEGY,
    TAGS,
    WHERE,
    RunsFilter,
)

# each column's least width (as wide as this text in the table's font), and its share of the
# width left over (names, tags and notes grow; figures do not)
SAMPLES = {NAME: "resnet-baseline-1", STATE: "finished", STRATEGY: "MultiWorker…",
           WHERE: "gpu-a, gpu", STARTED: "2026-11-26 16:21", DURATION: "Duration",
           STEPS: "100,000", FINAL_LOSS: "Final loss", BEST_VAL: "Best val.",
           TAGS: "baseline, lr", NOTE: "a short note"}
GROWS = {NAME: 3, STATE: 1, STRATEGY: 1, WHERE: 1, TAGS: 2, NOTE: 3}
# too narrow: who gives width first (a state is never cut: "running · not watched" is what
# tells a run nobody watches; a note is in its tooltip)
GIVE_ORDER = (NOTE, TAGS, WHERE, STRATEGY, NAME)
CELL_PAD = 16  # a cell's margins around its text
MEASURED_ROWS = 300  # the rows whose texts size the columns (not 10,000 measured each time)


class RunsTable(QTableView):
    """The rows of `proxy` (the filter over a `RunsModel`), its columns fitted to its width
    whenever its viewport is resized."""

    def __init__(self, proxy: RunsFilter, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("runsTable")
        self.proxy = proxy
        self.setModel(proxy)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        # several rows (ctrl/shift-click) for Compare; the other actions take one
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        # Tags and a note are typed in their cells: a double-click, a click on a selected
        # row's cell or F2 (a note of several lines opens a box of its own)
        self.setEditTriggers(QAbstractItemView.EditTrigger.EditKeyPressed
                             | QAbstractItemView.EditTrigger.SelectedClicked
                             | QAbstractItemView.EditTrigger.DoubleClicked)
        self.verticalHeader().setVisible(False)
        self.verticalHeader().setDefaultSectionSize(26)
        self.setWordWrap(False)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        header = self.horizontalHeader()
        # 10,000 rows: widths by the space there is, not by measuring every cell
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setSortIndicatorShown(True)
        header.setSectionsClickable(True)
        header.setSortIndicator(-1, Qt.SortOrder.DescendingOrder)
        header.sortIndicatorChanged.connect(proxy.runs.sort)
        self.viewport().installEventFilter(self)

    def row_at(self, view_row: int) -> RunRow:
        """The row shown at `view_row` (after the filter)."""
        source = self.proxy.mapToSource(self.proxy.index(view_row, 0))
        return self.proxy.runs.rows[source.row()]

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        # the viewport resized (after the page's layout): the columns fill it again
        if watched is self.viewport() and event.type() == QEvent.Type.Resize:
            self.fit_columns()
        return super().eventFilter(watched, event)

    def fit_columns(self) -> None:
        """Each column as wide as its title and its first rows' texts, the width left over
        shared (see the module's docstring)."""
        model = self.proxy.runs
        metrics = self.fontMetrics()
        bold_font = self.font()
        bold_font.setBold(True)
        bold = QFontMetrics(bold_font)  # a run still training reads in bold
        header = self.horizontalHeader()
        style = header.style()
        title_pad = 2 * style.pixelMetric(QStyle.PixelMetric.PM_HeaderMargin, None, header) \
            + style.pixelMetric(QStyle.PixelMetric.PM_HeaderMarkSize, None, header) + 4
        titles = header.fontMetrics()
        shown = [self.row_at(r) for r in range(min(self.proxy.rowCount(), MEASURED_ROWS))]
        least, need = {}, {}
        for column, text in SAMPLES.items():
            title = titles.horizontalAdvance(COLUMNS[column]) + title_pad
            # the state of a run still training is in bold: its least width is the bold one
            sample = bold if column == STATE else metrics
            least[column] = max(sample.horizontalAdvance(text) + CELL_PAD, title)
            widest = max(((bold if row.active else metrics).horizontalAdvance(
                model.text(row, column)) for row in shown), default=0)
            need[column] = max(least[column], widest + CELL_PAD)
        widths = dict(need)
        spare = self.viewport().width() - sum(need.values())
        if spare >= 0:
            grows = sum(GROWS.values())
            for column, share in GROWS.items():
                widths[column] += spare * share // grows
        for column in GIVE_ORDER:  # too narrow: what a column has over its least, in order
            if spare >= 0:
                break
            given = min(-spare, widths[column] - least[column])
            widths[column] -= given
            spare += given
        for column, width in widths.items():
            header.resizeSection(column, width)
