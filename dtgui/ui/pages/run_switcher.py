"""The dashboard's switcher: one tab a run the window holds (each live run, and each ended
one until its tab is closed), its name and state in the state's colour; a click shows that
run, an ended run's tab has a close button. Hidden while there is only one."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QStyle, QTabBar, QWidget

from dtgui.ui.pages.state_colours import STATE_COLOURS
from dtgui.ui.run_session import RunSession
from dtgui.ui.run_sessions import RunSessions


def tab_text(session: RunSession) -> str:
    source = session.source
    if source is None:
        return ""
    return f"\u25cf {source.run_name or 'run'} · {source.state}"


class RunSwitcher(QTabBar):
    def __init__(self, runs: RunSessions, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("runSwitcher")
        self.setExpanding(False)
        self.setDocumentMode(True)
        self.setElideMode(Qt.TextElideMode.ElideMiddle)
        self.setUsesScrollButtons(True)
        self.setToolTip("The runs this window follows: click one to show it (each keeps its "
                        "curves)")
        self.runs = runs
        self.sessions: list[RunSession] = []  # one a tab, in order
        self._filling = False
        runs.changed.connect(self.update_tabs)
        self.currentChanged.connect(self._chosen)
        self.setTabsClosable(True)  # shown on the tabs of ended runs only
        self.tabCloseRequested.connect(self._close)
        self.update_tabs()

    def update_tabs(self) -> None:
        """The tabs as the sessions are now (few: rebuilt whole)."""
        sessions = self.runs.shown_list()
        self._filling = True
        try:
            if sessions != self.sessions:
                while self.count():
                    self.removeTab(0)
                for _ in sessions:
                    self.addTab("")
                self.sessions = sessions
            for i, session in enumerate(sessions):
                state = str(session.source.state) if session.source is not None else ""
                self.setTabText(i, tab_text(session))
                self.setTabTextColor(i, QColor(STATE_COLOURS.get(state, "#5f6368")))
                self.setTabToolTip(i, session.message or tab_text(session))
                close = self.tabButton(i, self._close_side())
                if close is not None:
                    close.setVisible(not session.following)
                    close.setToolTip("Close this ended run's tab (the Runs page keeps it)")
            if self.runs.shown in sessions:
                self.setCurrentIndex(sessions.index(self.runs.shown))
        finally:
            self._filling = False
        self.setVisible(len(sessions) > 1)

    def _close_side(self) -> QTabBar.ButtonPosition:
        """The side the style puts a tab's close button on."""
        side = self.style().styleHint(QStyle.StyleHint.SH_TabBar_CloseButtonPosition, None,
                                      self)
        return QTabBar.ButtonPosition(side)

    def _close(self, index: int) -> None:
        if 0 <= index < len(self.sessions):
            self.runs.close(self.sessions[index])

    def _chosen(self, index: int) -> None:
        if not self._filling and 0 <= index < len(self.sessions):
            self.runs.show(self.sessions[index])
