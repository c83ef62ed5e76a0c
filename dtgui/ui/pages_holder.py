"""The main window's pages inside its scroll area: a page whose minimum is larger than the
screen scrolls, so the window never grows by itself (a wide table, a long message) past the
screen's edge."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSize
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QFrame, QScrollArea, QWidget


class PagesHolder(QWidget):
    """The pages at the scroll area's size. Without a layout it has no height-for-width, so
    a page's wrapped labels do not make the scroll area give it their ideal height (taller
    than the window): it scrolls only below the pages' minimum."""

    def __init__(self, pages: QWidget) -> None:
        super().__init__()
        self.pages = pages
        pages.setParent(self)

    def minimumSizeHint(self) -> QSize:
        return self.pages.minimumSizeHint()

    def sizeHint(self) -> QSize:
        return self.pages.sizeHint()

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.LayoutRequest:  # a page's minimum changed
            self.updateGeometry()
        return super().event(event)

    def resizeEvent(self, event: QResizeEvent) -> None:
        self.pages.setGeometry(self.rect())
        super().resizeEvent(event)


def scrolled_pages(pages: QWidget) -> QScrollArea:
    """`pages` in a frameless scroll area that gives them its size."""
    area = QScrollArea()
    area.setObjectName("pagesArea")
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setWidget(PagesHolder(pages))
    return area
