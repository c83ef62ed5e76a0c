"""What tests of Qt widgets share to read them: a table's cell, which Qt types as optional
(an empty cell has no item), for the tests that expect one there."""

from __future__ import annotations

from PySide6.QtWidgets import QTableWidget, QTableWidgetItem


def cell(table: QTableWidget, row: int, column: int) -> QTableWidgetItem:
    """The item at (`row`, `column`); fails the test when that cell is empty."""
    item = table.item(row, column)
    assert item is not None, f"no item at row {row}, column {column}"
    return item


def cell_text(table: QTableWidget, row: int, column: int) -> str:
    """The text at (`row`, `column`); fails the test when that cell is empty."""
    return cell(table, row, column).text()
