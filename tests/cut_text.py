"""Text a person cannot read whole: a walker over the widgets of a page that lists every
label whose text is wider than the label, every label shortened with "…" that has room for
its whole text (its tooltip), every table header whose section is narrower than its title,
every table cell Qt elides, and every plot axis whose title is longer than the axis. Generic: it knows no page,
so a new label or column is checked without a line of its own. Right after a change of layout
(a column shown or hidden) it would measure the old geometry: `lay_out_now` first."""

from __future__ import annotations

from PySide6 import QtGui
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QFontMetrics, QTextDocument
from PySide6.QtWidgets import (
    QApplication,
    QHeaderView,
    QLabel,
    QStyle,
    QStyleOptionViewItem,
    QTableView,
    QWidget,
)

SLACK_PX = 1  # rounding of text widths
LAYOUT_ROUNDS = 4  # a layout done can ask its parent's again: nested pages take a few rounds


def lay_out_now() -> None:
    """Do the layouts Qt has put off (posted, to be done at the next turn of the event
    loop), so that what is measured is what will be shown."""
    for _ in range(LAYOUT_ROUNDS):
        QApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)


def _text_width(label: QLabel) -> int:
    """The width the label's text needs on one line (each line of a plain text; rich text
    laid out as Qt lays it out)."""
    text = label.text()
    rich = label.textFormat() == Qt.TextFormat.RichText or (
        label.textFormat() == Qt.TextFormat.AutoText and QtGui.Qt.mightBeRichText(text))
    if rich:
        doc = QTextDocument()
        doc.setDefaultFont(label.font())
        doc.setDocumentMargin(0)
        doc.setHtml(text)
        return int(doc.idealWidth() + 0.999)
    metrics = QFontMetrics(label.font())
    return max(metrics.horizontalAdvance(line) for line in text.split("\n"))


def cut_labels(root: QWidget) -> list[str]:
    """Every label shown under `root` whose text does not fit its width (a label that
    wraps its words, shows a picture or has no text cannot be cut)."""
    found = []
    for label in root.findChildren(QLabel):
        if not label.isVisibleTo(root) or label.wordWrap() or not label.text().strip():
            continue
        room = label.contentsRect().width() - 2 * label.margin() - max(0, label.indent())
        need = _text_width(label)
        if need > room + SLACK_PX:
            name = label.objectName() or type(label.parent()).__name__
            found.append(f"label {label.text()!r} ({name}) needs {need} px, has {room} px")
    return found


def shortened_labels(root: QWidget) -> list[str]:
    """Every label shown under `root` that reads shortened ("…", its whole text in its
    tooltip) although its whole text fits its width."""
    found = []
    for label in root.findChildren(QLabel):
        whole = label.toolTip()
        if not label.isVisibleTo(root) or "…" not in label.text() or not whole \
                or "\n" in whole or QtGui.Qt.mightBeRichText(whole):
            continue
        room = label.contentsRect().width() - 2 * label.margin() - max(0, label.indent())
        need = QFontMetrics(label.font()).horizontalAdvance(whole)
        if need <= room:
            found.append(f"label {label.text()!r} is shortened, though {whole!r} "
                         f"({need} px) fits its {room} px")
    return found


def cut_cells(root: QWidget, rows: int = 30) -> list[str]:
    """Every cell of the first `rows` rows of a table shown under `root` whose text needs
    more width than its column has (as its delegate measures it: a bold row bold, an icon
    counted)."""
    found = []
    for table in root.findChildren(QTableView):
        model = table.model()
        if model is None or not table.isVisibleTo(root):
            continue
        for row in range(min(rows, model.rowCount())):
            for column in range(model.columnCount()):
                index = model.index(row, column)
                text = index.data(Qt.ItemDataRole.DisplayRole)
                if table.isColumnHidden(column) or table.indexWidget(index) \
                        or not isinstance(text, str) or not text:
                    continue
                option = QStyleOptionViewItem()
                table.initViewItemOption(option)
                need = table.itemDelegateForIndex(index).sizeHint(option, index).width()
                room = table.columnWidth(column)
                if need > room + SLACK_PX:
                    found.append(f"cell {text!r} of {type(table).__name__} needs {need} px, "
                                 f"has {room} px")
    return found


def cut_headers(root: QWidget) -> list[str]:
    """Every column title shown under `root` whose section is narrower than the title (the
    header's margins and, when it sorts, its sort arrow counted)."""
    found = []
    for header in root.findChildren(QHeaderView):
        model = header.model()
        if model is None or header.orientation() != Qt.Orientation.Horizontal \
                or not header.isVisibleTo(root):
            continue
        style = header.style()
        margin = 2 * style.pixelMetric(QStyle.PixelMetric.PM_HeaderMargin, None, header)
        if header.isSortIndicatorShown():
            margin += style.pixelMetric(QStyle.PixelMetric.PM_HeaderMarkSize, None, header)
        metrics = QFontMetrics(header.font())
        for section in range(header.count()):
            title = model.headerData(section, Qt.Orientation.Horizontal)
            if header.isSectionHidden(section) or not title:
                continue
            need = max(metrics.horizontalAdvance(line) for line in str(title).split("\n"))
            room = header.sectionSize(section) - margin
            if need > room + SLACK_PX:
                found.append(f"column {str(title)!r} of {type(header.parent()).__name__} "
                             f"needs {need} px, has {room} px")
    return found


def cut_axis_titles(root: QWidget) -> list[str]:
    """Every plot under `root` whose axis title is longer than its axis (pyqtgraph draws a
    title that does not fit cut at both ends)."""
    import pyqtgraph as pg

    found = []
    for view in root.findChildren(pg.PlotWidget):
        if not view.isVisibleTo(root):
            continue
        plot = view.getPlotItem()
        for side in ("left", "bottom", "right"):
            axis = plot.getAxis(side) if side in plot.axes else None
            if axis is None or not axis.isVisible() or not axis.label.isVisible() \
                    or not axis.labelText:
                continue
            need = axis.label.boundingRect().width()
            room = axis.geometry().height() if side != "bottom" else axis.geometry().width()
            if need > room + SLACK_PX:
                found.append(f"axis title {axis.labelText!r} needs {need:.0f} px, has "
                             f"{room:.0f} px")
    return found


def cut_texts(root: QWidget) -> list[str]:
    """Everything cut under `root`: labels (cut or shortened with room to spare), column
    titles, table cells, axis titles."""
    return (cut_labels(root) + shortened_labels(root) + cut_headers(root) + cut_cells(root)
            + cut_axis_titles(root))
