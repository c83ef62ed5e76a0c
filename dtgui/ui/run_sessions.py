"""Every run the window follows: one `RunSession` a run, one of them shown.

A launch, a reattach, a resume or an opened run each get a session of their own (`new`), so
that runs started from one window train side by side, each followed to its end by its own
session. One session is shown (`shown`): the dashboard draws its run, and `stateChanged` and
`ended` here are that run's (the dashboard listens to them as to a single session); `show`
switches to another, whose curves its run kept (they live in the run's `LiveRun`, not in the
plots). A session whose run ended stays (its tab in the switcher, its curves) until the
user closes it (`close`); one that could not start goes at once, and so does an empty one
once another run is shown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from dtgui.ui.run_session import RunLife, RunSession

if TYPE_CHECKING:
    from dtgui.launch.runs.run_source import RunSource
    from dtgui.ui.machines.panel import MachinesPanel


class RunSessions(RunLife):
    """The window's sessions; the shown one's life is told here as well as by itself
    (`stateChanged`, `ended`: the shown run's; `progress`, `failed`, `endedWhileClosed`:
    any session's)."""

    made = Signal(object)  # RunSession: a new session, before it starts anything
    shownChanged = Signal(object)  # RunSession: the session shown now (its run started)
    changed = Signal()  # a session came, went, or its run's state changed (the switcher)
    runEnded = Signal(object)  # RunSession: a run followed live ended (shown or not)

    def __init__(self, machines: Callable[[], MachinesPanel] | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(machines, parent)
        self.sessions: list[RunSession] = []
        self.shown = self._make()  # the next launch's until a run is shown

    # -- reading -------------------------------------------------------------------------------
    def live(self) -> list[RunSession]:
        """The sessions whose run is still followed (training, stopping, or its end not yet
        told)."""
        return [s for s in self.sessions if s.following]

    def busy(self) -> list[RunSession]:
        """The sessions starting a run (a launch, reattach or resume under way)."""
        return [s for s in self.sessions if s.busy]

    def shown_list(self) -> list[RunSession]:
        """The sessions the switcher offers: those holding a run, in the order they came."""
        return [s for s in self.sessions if s.source is not None]

    def holding(self, folder: str, ended: bool = False) -> RunSession | None:
        """The session following the run whose local bundle is `folder` (`ended`: or
        holding it ended, its tab not closed yet)."""
        for session in self.sessions:
            source = session.source
            if (session.following or ended) and source is not None \
                    and str(source.bundle.path) == folder:
                return session
        return None

    def followed(self) -> dict[str, RunSource]:
        """The followed runs by their local bundle's folder."""
        return {str(s.source.bundle.path): s.source for s in self.live() if s.source is not None}

    # -- making and showing ----------------------------------------------------------------------
    def new(self) -> RunSession:
        """A session for the next launch, reattach, resume or opening: the shown one while it
        holds nothing yet, else a new one (the runs followed go on)."""
        shown = self.shown
        if shown.source is None and not shown.busy:
            return shown
        return self._make()

    def show(self, session: RunSession) -> None:
        """Show `session`'s run (the dashboard attaches to it through `shownChanged`)."""
        if session not in self.sessions or session.source is None:
            return
        self.shown = session
        for other in self.sessions:  # what is not shown is read less often
            if other.source is not None:
                other.source.follow_closely(other is session)
        self._let_go()
        self.shownChanged.emit(session)
        self.changed.emit()

    def close(self, session: RunSession) -> None:
        """Let go of `session`, whose run has ended (a run still followed is never closed
        here: it is stopped, or kept training when dtgui quits); the shown one gives way to
        the run next to it."""
        if session not in self.sessions or session.following or session.busy:
            return
        if session is self.shown:
            others = [s for s in self.shown_list() if s is not session]
            if not others:
                return  # the last run shown stays on the dashboard
            held = self.shown_list()
            at = held.index(session)
            self.show(others[min(at, len(others) - 1)])
        self._drop(session)

    def _make(self) -> RunSession:
        session = RunSession(self._machines, self)
        self.sessions.append(session)
        session.started.connect(lambda _source: self.show(session))
        session.stateChanged.connect(lambda *said: self._state(session, *said))
        session.ended.connect(lambda *said: self._ended(session, *said))
        session.progress.connect(self.progress)
        session.failed.connect(lambda text: self._failed(session, text))
        session.endedWhileClosed.connect(self.endedWhileClosed)
        self.made.emit(session)
        return session

    def _state(self, session: RunSession, state: str, message: str) -> None:
        if session is self.shown:
            self.stateChanged.emit(state, message)
        self.changed.emit()

    def _ended(self, session: RunSession, state: str, message: str) -> None:
        if session is self.shown:
            self.ended.emit(state, message)
        self.runEnded.emit(session)
        self.changed.emit()

    def _failed(self, session: RunSession, text: str) -> None:
        """A session that could not start its run holds nothing: it goes (but the shown
        one, kept for the next launch)."""
        if session.source is None and session is not self.shown:
            self._drop(session)
        self.failed.emit(text)

    def _let_go(self) -> None:
        """Sessions no longer worth holding: an empty one that is neither starting nor
        shown (an ended run's stays until it is closed)."""
        for session in list(self.sessions):
            if session is self.shown or session.busy or session.source is not None:
                continue
            self._drop(session)

    def _drop(self, session: RunSession) -> None:
        self.sessions.remove(session)
        session.deleteLater()
        self.changed.emit()
