"""A table's cells for assertions: Qt answers None for an empty cell, a test wants the item."""

from __future__ import annotations

from PySide6.QtWidgets import QTableWidget, QTableWidgetItem


def item_at(table: QTableWidget, row: int, column: int) -> QTableWidgetItem:
    """The item at (row, column); a cell without one fails the test there."""
    item = table.item(row, column)
    assert item is not None, f"no item at row {row}, column {column}"
    return item


def text_at(table: QTableWidget, row: int, column: int) -> str:
    return item_at(table, row, column).text()


def header_text(table: QTableWidget, column: int) -> str:
    header = table.horizontalHeaderItem(column)
    assert header is not None, f"no header item for column {column}"
    return header.text()
