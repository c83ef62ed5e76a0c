"""What to do with a run still training when dtgui quits: keep it training without dtgui (a
reopened dtgui reattaches from Runs), stop every task of it, or not quit."""

from __future__ import annotations

import enum

from PySide6.QtWidgets import QMessageBox, QWidget


class QuitAnswer(enum.Enum):
    KEEP = "keep"
    STOP = "stop"
    CANCEL = "cancel"


def ask_on_quit(parent: QWidget) -> QuitAnswer:
    box = QMessageBox(QMessageBox.Icon.Question, "A run is still training",
                      "A run is still training. Keep it training without dtgui (reopen "
                      "dtgui and reattach from Runs), or stop every task of it now?",
                      parent=parent)
    keep = box.addButton("Keep training", QMessageBox.ButtonRole.AcceptRole)
    stop = box.addButton("Stop and quit", QMessageBox.ButtonRole.DestructiveRole)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.exec()
    clicked = box.clickedButton()
    if clicked is keep:
        return QuitAnswer.KEEP
    return QuitAnswer.STOP if clicked is stop else QuitAnswer.CANCEL
