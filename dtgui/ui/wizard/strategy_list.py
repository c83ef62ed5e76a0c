"""The strategy list of page 1: two lines per strategy (title, then what it is in a few words)."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QRect, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPalette
from PySide6.QtWidgets import (
    QApplication,
    QListWidget,
    QListWidgetItem,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QWidget,
)

from dtgui.core.plans.strategies import STRATEGIES

ROLE_KEY = Qt.ItemDataRole.UserRole
ROLE_TAGLINE = Qt.ItemDataRole.UserRole + 1
RECOMMENDED = "(recommended)"

# The catalogue's texts by strategy name.
TAGLINES = {key: s.tagline for key, s in STRATEGIES.items()}
GOOD_FOR = {key: s.good_for for key, s in STRATEGIES.items()}
API = {key: s.tf_class for key, s in STRATEGIES.items()}
UPDATES = {key: s.updates for key, s in STRATEGIES.items()}

Index = QModelIndex | QPersistentModelIndex


class TwoLineDelegate(QStyledItemDelegate):
    """The item's text in bold (a trailing \"(recommended)\" in green), ROLE_TAGLINE below."""

    def sizeHint(self, option: QStyleOptionViewItem, index: Index) -> QSize:
        metrics = QFontMetrics(option.font)
        return QSize(200, metrics.height() * 2 + 18)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: Index) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        text = opt.text
        opt.text = ""
        widget = opt.widget
        style = widget.style() if widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, widget)
        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        palette: QPalette = opt.palette
        rect: QRect = opt.rect.adjusted(10, 7, -8, -7)
        strong = palette.color(QPalette.ColorRole.HighlightedText if selected
                               else QPalette.ColorRole.Text)
        soft = strong if selected else QColor("#6b7280")
        painter.save()
        title, _, rest = text.partition(RECOMMENDED)
        bold = QFont(opt.font)
        bold.setBold(True)
        painter.setFont(bold)
        painter.setPen(strong)
        title = title.rstrip()
        painter.drawText(rect, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop, title)
        if rest or text.endswith(RECOMMENDED):
            offset = QFontMetrics(bold).horizontalAdvance(title + "  ")
            painter.setFont(opt.font)
            painter.setPen(strong if selected else QColor("#15803d"))
            painter.drawText(rect.adjusted(offset, 0, 0, 0),
                             Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop, RECOMMENDED)
        small = QFont(opt.font)
        small.setPointSizeF(max(7.0, small.pointSizeF() * 0.9))
        painter.setFont(small)
        painter.setPen(soft)
        painter.drawText(rect, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignBottom,
                         str(index.data(ROLE_TAGLINE) or ""))
        painter.restore()


class StrategyList(QListWidget):
    """Every strategy of the catalogue; the recommended one says so."""

    def __init__(self, recommended: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("strategyList")
        self.setItemDelegate(TwoLineDelegate(self))
        self.setUniformItemSizes(True)
        for key, info in STRATEGIES.items():
            text = info.title + (f"  {RECOMMENDED}" if key == recommended else "")
            item = QListWidgetItem(text)
            item.setData(ROLE_KEY, key)
            item.setData(ROLE_TAGLINE, TAGLINES.get(key, ""))
            item.setToolTip(info.summary)
            self.addItem(item)

    def key(self) -> str:
        item = self.currentItem()
        return str(item.data(ROLE_KEY)) if item is not None else ""

    def select(self, key: str) -> None:
        for row in range(self.count()):
            if self.item(row).data(ROLE_KEY) == key:
                self.setCurrentRow(row)
                return
