"""What to do with the runs still training when dtgui quits, asked once for all of them: keep
them training without dtgui (a reopened dtgui reattaches from Runs), stop every task of each,
or not quit."""

from __future__ import annotations

import enum

from PySide6.QtWidgets import QMessageBox, QWidget

NAMES_SHOWN = 6  # runs named in the question; more are counted


class QuitAnswer(enum.Enum):
    KEEP = "keep"
    STOP = "stop"
    CANCEL = "cancel"


def quit_text(names: list[str]) -> tuple[str, str]:
    """The question's title and text for the runs named `names`."""
    if len(names) <= 1:
        return ("A run is still training",
                "A run is still training. Keep it training without dtgui (reopen dtgui and "
                "reattach from Runs), or stop every task of it now?")
    shown = ", ".join(names[:NAMES_SHOWN])
    more = f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else ""
    return (f"{len(names)} runs are still training",
            f"{len(names)} runs are still training ({shown}{more}). Keep them all training "
            "without dtgui (reopen dtgui and reattach from Runs), or stop every task of each "
            "now?")


def ask_on_quit(parent: QWidget, names: list[str] | None = None) -> QuitAnswer:
    title, text = quit_text(names or [])
    box = QMessageBox(QMessageBox.Icon.Question, title, text, parent=parent)
    keep = box.addButton("Keep training", QMessageBox.ButtonRole.AcceptRole)
    stop = box.addButton("Stop and quit", QMessageBox.ButtonRole.DestructiveRole)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.exec()
    clicked = box.clickedButton()
    if clicked is keep:
        return QuitAnswer.KEEP
    return QuitAnswer.STOP if clicked is stop else QuitAnswer.CANCEL
