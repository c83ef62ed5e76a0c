"""RunSession is the one place that follows a shown run's life: each restart, each change of
state or message, and the end are told once, as typed signals, and only for a run followed
live (pytest-qt, with a fake run moved by hand)."""

from __future__ import annotations

import pytest
from fakes import FakeRun
from pytestqt.qtbot import QtBot

from dtgui.core.plans.plan import Plan
from dtgui.core.runs.run_state import RunState
from dtgui.ui.run_session import LIFE_MS, RunSession

pytestmark = pytest.mark.gui


class Told:
    """Everything a session said, in order."""

    def __init__(self, session: RunSession) -> None:
        self.all: list[tuple[object, ...]] = []
        session.started.connect(lambda source: self.all.append(("started", source)))
        session.stateChanged.connect(lambda *args: self.all.append(("state", *args)))
        session.restarted.connect(lambda count: self.all.append(("restarted", count)))
        session.ended.connect(lambda *args: self.all.append(("ended", *args)))

    def of(self, kind: str) -> list[tuple[object, ...]]:
        return [said[1:] for said in self.all if said[0] == kind]


def test_each_restart_change_and_the_end_are_told_once(qtbot: QtBot) -> None:
    session = RunSession()
    told = Told(session)
    run = FakeRun(plan=Plan(run_name="digits"), max_restarts=2)
    session.show(run)
    assert told.of("started") == [(run,)] and session.active and session.following
    qtbot.wait(3 * LIFE_MS)
    # the state it is followed from, then nothing: nothing changed
    assert told.all == [("started", run), ("state", "running", "")]

    run.message = "worker:1 is a straggler"
    qtbot.waitUntil(lambda: len(told.of("state")) == 2, timeout=2000)
    run.restart("worker:1 failed: restarting every task (restart 1 of 2)")
    qtbot.waitUntil(lambda: told.of("restarted") == [(1,)], timeout=2000)
    run.state = RunState.STOPPING
    with qtbot.waitSignal(session.ended, timeout=2000) as ended:
        run.end("stopped", "stopped by the user")
    assert ended.args == ["stopped", "stopped by the user"]
    qtbot.wait(3 * LIFE_MS)
    assert told.of("restarted") == [(1,)]
    assert told.of("ended") == [("stopped", "stopped by the user")]
    states = told.of("state")
    assert states[1] == ("running", "worker:1 is a straggler")
    assert states[2] == ("running", "worker:1 failed: restarting every task (restart 1 of 2)")
    assert states[-1] == ("stopped", "stopped by the user")
    assert len(states) == len(set(states))  # each change once
    assert told.all.index(("ended", "stopped", "stopped by the user")) == len(told.all) - 1
    assert not session.active and not session.following


def test_what_a_listener_reads_while_taking_the_run_is_not_left_shown(qtbot: QtBot) -> None:
    """A Slurm run's first poll may land while the dashboard takes the run (reading its
    state and message then), and the job may start before the session looks again: what the
    listener read must not stay shown once the run has moved on."""
    session = RunSession()
    run = FakeRun()
    queued = "Slurm job 1 is waiting in the queue"
    shown: list[tuple[str, str]] = []

    def take(source: FakeRun) -> None:  # as Dashboard.attach: the run as it is now
        run.message = queued  # the first poll landed meanwhile
        shown.append((source.state, source.message))
        run.message = ""  # and the job runs before the session's next look

    session.started.connect(take)
    session.stateChanged.connect(lambda *said: shown.append(said))
    session.show(run)
    qtbot.wait(3 * LIFE_MS)
    assert shown[0] == ("running", queued)
    assert shown[-1] == ("running", "")


def test_a_run_that_ended_before_it_was_shown_tells_no_end(qtbot: QtBot) -> None:
    session = RunSession()
    told = Told(session)
    old = FakeRun(plan=Plan(run_name="old"))
    old.end("finished", final_loss=0.25)
    session.show(old)
    qtbot.wait(3 * LIFE_MS)
    assert told.all == [("started", old)]
    assert not session.active and not session.following


def test_a_new_run_replaces_the_followed_one(qtbot: QtBot) -> None:
    session = RunSession()
    told = Told(session)
    first, second = FakeRun(), FakeRun()
    session.show(first)
    session.show(second)
    first.end("failed", "never told: no longer shown")
    qtbot.wait(3 * LIFE_MS)
    assert told.of("ended") == []
    with qtbot.waitSignal(session.ended, timeout=2000) as ended:
        second.end("finished")
    assert ended.args[0] == "finished"


def test_keep_training_hands_the_run_over_and_tells_nothing_more(qtbot: QtBot) -> None:
    session = RunSession()
    told = Told(session)
    run = FakeRun()  # started outside the app: no record for a watcher
    session.show(run)
    warning = session.keep_training()
    assert run.detached and "no run record" in warning
    assert not session.following
    run.end("detached")
    qtbot.wait(3 * LIFE_MS)
    assert told.of("ended") == [] and told.of("state") == [("running", "")]  # when shown
