"""The sweep view's table of trials: each column as wide as its contents, and on a wider page
the width left over shared among them as wide as they are (a sweep's few columns do not
leave most of a wide screen blank beside them); narrower than its contents, it scrolls."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QAbstractItemView, QTableWidget, QWidget


class TrialsTable(QTableWidget):
    """Rows selected whole, read only; `fit_columns()` once its cells are filled."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, 0, parent)
        self.horizontalHeader().setStretchLastSection(True)  # takes what rounding leaves
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.verticalHeader().hide()  # the trial column numbers the rows
        self._contents: list[int] = []  # each column's width for its contents, last measured
        self.viewport().installEventFilter(self)

    def fit_columns(self) -> None:
        """Measure each column's contents (every cell: call it once the table is filled),
        then share the width left over."""
        self.resizeColumnsToContents()
        header = self.horizontalHeader()
        self._contents = [header.sectionSize(c) for c in range(header.count())]
        self._share()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        # the viewport resized: the width left over shared again (nothing measured again)
        if watched is self.viewport() and event.type() == QEvent.Type.Resize:
            self._share()
        return super().eventFilter(watched, event)

    def _share(self) -> None:
        contents = self._contents
        if len(contents) != self.columnCount() or not contents:
            return
        total = sum(contents)
        spare = max(0, self.viewport().width() - total)
        header = self.horizontalHeader()
        for column, width in enumerate(contents[:-1]):  # the last stretches to the edge
            header.resizeSection(column, width + spare * width // total)
