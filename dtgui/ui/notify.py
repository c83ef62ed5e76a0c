"""Desktop notifications while dtgui is open: a run finished, failed, or restarted from its
last checkpoint.

`Notifier.notify(title, text)` shows a system-tray message when the desktop has a tray
(`QSystemTrayIcon`), else a toast over the window's status bar, which says it too (an
offscreen or tray-less session still gets it, and tests can see it): it covers nothing of a
page (in a corner it would cover the dashboard's Memory table). `RunNotices` subscribes to
each `RunSession`'s `restarted` and `ended` signals, which are told once each and only for a run
followed live: a run opened from the history has already ended, and says nothing.
"""

from __future__ import annotations

import html
import weakref
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QLabel, QMainWindow, QSystemTrayIcon, QWidget

from dtgui.core.runs.run_state import RunState

if TYPE_CHECKING:
    from dtgui.ui.run_session import RunSession

TOAST_MS = 8000
TRAY_MS = 10000
TOAST_STYLE = ("QLabel#toast { background: #202124; color: #ffffff; border-radius: 4px; "
               "padding: 0px 10px; }")


class Toast(QLabel):
    """A message on one line over the window's status bar (a window without one: its
    bottom edge), gone after a few seconds."""

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.setObjectName("toast")
        self.setStyleSheet(TOAST_STYLE)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.hide)
        self.hide()

    def show_message(self, title: str, text: str, ms: int = TOAST_MS) -> None:
        self.setText(f"<b>{html.escape(title)}</b> · {html.escape(text)}")
        self.adjustSize()
        parent = self.parentWidget()
        if parent is not None:
            bar = parent.statusBar() if isinstance(parent, QMainWindow) else None
            height = bar.height() if bar is not None and bar.isVisible() else self.height()
            self.setGeometry(0, parent.height() - height,
                             min(self.sizeHint().width(), parent.width()), height)
        self.raise_()
        self.show()
        self._timer.start(ms)


class Notifier(QObject):
    """Tells the user about something that happened while they may be looking elsewhere."""

    shown = Signal(str, str)  # title, text

    def __init__(self, window: QWidget, icon: QIcon | None = None) -> None:
        super().__init__(window)
        self.window = window
        self.history: list[tuple[str, str]] = []
        self.toast = Toast(window)
        self.tray: QSystemTrayIcon | None = None
        if QSystemTrayIcon.isSystemTrayAvailable() and QSystemTrayIcon.supportsMessages():
            self.tray = QSystemTrayIcon(icon or window.windowIcon(), self)
            self.tray.setToolTip("dtgui")
            self.tray.activated.connect(self._raise_window)

    @property
    def uses_tray(self) -> bool:
        return self.tray is not None

    def notify(self, title: str, text: str, warning: bool = False) -> None:
        self.history.append((title, text))
        if self.tray is not None:
            if not self.tray.isVisible():
                self.tray.show()
            icon = (QSystemTrayIcon.MessageIcon.Warning if warning
                    else QSystemTrayIcon.MessageIcon.Information)
            self.tray.showMessage(title, text, icon, TRAY_MS)
        else:
            self.toast.show_message(title, text)
        if isinstance(self.window, QMainWindow):
            self.window.statusBar().showMessage(f"{title}: {text}", 15000)
        self.shown.emit(title, text)

    def _raise_window(self, *_args: object) -> None:
        self.window.showNormal()
        self.window.raise_()
        self.window.activateWindow()


class RunNotices(QObject):
    """Notifies when a followed run finishes, fails or restarts from a checkpoint: each
    session it watches (`watch`), shown or not, is told by its own name."""

    def __init__(self, notifier: Notifier, session: RunSession | None = None) -> None:
        super().__init__(notifier)
        self.notifier = notifier
        self._watched: weakref.WeakSet[RunSession] = weakref.WeakSet()
        if session is not None:
            self.watch(session)

    def watch(self, session: RunSession) -> None:
        if session in self._watched:  # told once, however often it is asked
            return
        self._watched.add(session)
        session.restarted.connect(lambda restarts: self._restarted(session, restarts))
        session.ended.connect(lambda state, message: self._ended(session, state, message))

    @staticmethod
    def _name(session: RunSession) -> str:
        source = session.source
        return (source.run_name if source is not None else "") or "The run"

    def _restarted(self, session: RunSession, restarts: int) -> None:
        source = session.source
        limit = source.max_restarts if source is not None else 0
        of = f" of {limit}" if limit else ""
        self.notifier.notify(f"{self._name(session)} restarted",
                             f"Restarted from its last checkpoint (restart {restarts}{of}). "
                             f"{session.message}".strip(), warning=True)

    def _ended(self, session: RunSession, state: str, message: str) -> None:
        if state == RunState.FINISHED:
            source = session.source
            loss = source.final_loss if source is not None else None
            detail = f"final loss {loss:.4g}" if loss is not None else message
            self.notifier.notify(f"{self._name(session)} finished",
                                 detail or "Training finished.")
        elif state == RunState.FAILED:
            self.notifier.notify(f"{self._name(session)} failed", message or "A task failed.",
                                 warning=True)
