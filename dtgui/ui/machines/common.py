"""Small helpers shared by the machines dialogs."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase, QIcon
from PySide6.QtWidgets import QDialogButtonBox, QLabel, QWidget


def plain_buttons(box: QDialogButtonBox) -> QDialogButtonBox:
    """No style icons on dialog buttons: the app's buttons are text only."""
    for button in box.buttons():
        button.setIcon(QIcon())
    return box


def mono_label(text: str, name: str = "mono") -> QLabel:
    """Selectable monospace text in a light box (fingerprints, commands)."""
    label = QLabel(text)
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    font.setPointSizeF(max(font.pointSizeF(), 10.0))
    label.setFont(font)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                  | Qt.TextInteractionFlag.TextSelectableByKeyboard)
    label.setObjectName(name)
    label.setStyleSheet(f"QLabel#{name} {{ background: #ffffff; border: 1px solid #dde1e6;"
                        " border-radius: 4px; padding: 6px 8px; }")
    # A fingerprint must be read whole: never let the layout clip it.
    widest = max((label.fontMetrics().horizontalAdvance(line) for line in text.splitlines()),
                 default=0)
    label.setMinimumWidth(widest + 24)
    return label


def repolish(widget: QWidget, name: str) -> None:
    """Change a widget's objectName (its style-sheet class) and apply it now."""
    widget.setObjectName(name)
    widget.style().unpolish(widget)
    widget.style().polish(widget)
