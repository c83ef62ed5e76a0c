"""What to do with the runs still training when dtgui quits, asked once for all of them: keep
them training without dtgui (a reopened dtgui reattaches from Runs), stop every task of each,
or not quit; queued runs (they start when their machines are free, dtgui open or not) are
named too."""

from __future__ import annotations

import enum

from PySide6.QtWidgets import QMessageBox, QWidget

NAMES_SHOWN = 6  # runs named in the question; more are counted


class QuitAnswer(enum.Enum):
    KEEP = "keep"
    STOP = "stop"
    CANCEL = "cancel"


def quit_text(names: list[str], queued: int = 0) -> tuple[str, str]:
    """The question's title and text for the runs named `names`, with `queued` runs still
    waiting in the queue."""
    if len(names) <= 1:
        title = "A run is still training"
        text = ("A run is still training. Keep it training without dtgui (reopen dtgui and "
                "reattach from Runs), or stop every task of it now?")
    else:
        shown = ", ".join(names[:NAMES_SHOWN])
        more = f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else ""
        title = f"{len(names)} runs are still training"
        text = (f"{len(names)} runs are still training ({shown}{more}). Keep them all "
                "training without dtgui (reopen dtgui and reattach from Runs), or stop every "
                "task of each now?")
    if queued:
        # the queue's own process starts them: quitting, and "Stop and quit", leave them be
        runs = ("1 queued run will start when its machines are" if queued == 1 else
                f"{queued} queued runs will start when their machines are")
        text += (f"\n\n{runs} free, also after dtgui has closed; cancel them on the Runs "
                 "page.")
    return title, text


def ask_on_quit(parent: QWidget, names: list[str] | None = None, queued: int = 0
                ) -> QuitAnswer:
    title, text = quit_text(names or [], queued)
    box = QMessageBox(QMessageBox.Icon.Question, title, text, parent=parent)
    keep = box.addButton("Keep training", QMessageBox.ButtonRole.AcceptRole)
    stop = box.addButton("Stop and quit", QMessageBox.ButtonRole.DestructiveRole)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.exec()
    clicked = box.clickedButton()
    if clicked is keep:
        return QuitAnswer.KEEP
    return QuitAnswer.STOP if clicked is stop else QuitAnswer.CANCEL
