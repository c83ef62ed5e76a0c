"""One window, many runs: a second run launched while the first trains, both followed to their
ends (each end notified), the dashboard switching between them with each run's curves kept,
the Runs page's rows live without Refresh; a run queued from the window ("Launch when free")
that waits for the window's run and starts after it; closing with several runs training asks
once for all of them. Runs train with the stub child (tests/stub_task.py), not TensorFlow."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fakes import FakeRun, event, step_losses, steps_fields
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractButton, QMessageBox
from pytestqt.qtbot import QtBot
from widgets import answer_question, dashboard_of

from dtgui.core.plans.placement import place_local
from dtgui.core.plans.plan import MachineAccess, Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.live_progress import EventsProgress, read_live, recent_offset
from dtgui.core.runs.queue_file import QueueEntry
from dtgui.core.runs.records import RunHistory, RunRecord
from dtgui.core.runs.run_index import RunRow
from dtgui.launch.controller import RunController
from dtgui.launch.queue.run_queue import QUEUE_PROCESS, QueuedRun, queue_dir, queued_runs
from dtgui.launch.start.watcher import stop_watcher
from dtgui.ui import main_window
from dtgui.ui.main_window import MainWindow
from dtgui.ui.pages.run_switcher import RunSwitcher
from dtgui.ui.pages.runs_model import BEST_VAL, DURATION, FINAL_LOSS, STATE, STEPS
from dtgui.ui.quit_question import QuitAnswer
from dtgui.ui.run_session import RunSession

pytestmark = pytest.mark.gui


def cpu_plan(name: str, python: str, steps: int) -> Plan:
    """A run on this machine's CPU, its task run by `python` (the stub child)."""
    plan = place_local(Plan(run_name=name, strategy=Strategy.ONE_DEVICE, replicas_per_task=1,
                            steps=steps,
                            steps_per_epoch=20, checkpoint_every=0))
    return plan.with_changes(machines={"local": MachineAccess(python=python)})


def row_cells(window: MainWindow, name: str) -> tuple[str, str] | None:
    """(state, steps) of the run `name` on the Runs page as shown."""
    page = window.runs_page
    for i in range(page.row_count()):
        if page.row_at(i).name == name:
            return page.cell_text(i, STATE), page.cell_text(i, STEPS)
    return None


def cell_of(window: MainWindow, name: str, column: int) -> str:
    page = window.runs_page
    return next((page.cell_text(i, column) for i in range(page.row_count())
                 if page.row_at(i).name == name), "")


def duration_of(window: MainWindow, name: str) -> str:
    return cell_of(window, name, DURATION)


def state_of(window: MainWindow, name: str) -> str:
    cells = row_cells(window, name)
    return cells[0] if cells is not None else ""


def controller(session: RunSession) -> RunController:
    assert isinstance(session.source, RunController), session.source
    return session.source


@pytest.fixture
def window(qtbot: QtBot, monkeypatch: pytest.MonkeyPatch) -> Iterator[MainWindow]:
    """The main window; a launch that fails fails the test (with its message, instead of a
    box that waits for a click); after the test no run of it, nor the queue's process,
    left."""
    said: list[str] = []
    monkeypatch.setattr(QMessageBox, "warning", lambda _parent, title, text: said.append(
        f"{title}: {text}"))
    made = MainWindow()
    made.show()  # closed here, not by pytest-qt: with a run left live its question would wait
    yield made
    try:
        assert not said, said
        for session in made.runs.live():
            session.request_stop()
        qtbot.waitUntil(lambda: not made.runs.live(), timeout=60_000)
        QUEUE_PROCESS.stop(queue_dir())
    finally:
        # a test that failed with runs live: its end is a failure, not a question left open
        monkeypatch.setattr(main_window, "ask_on_quit", lambda *_a, **_k: QuitAnswer.STOP)
        made.close()
        made.deleteLater()
    for record in RunHistory().running():
        with contextlib.suppress(Exception):
            stop_left(record)


def stop_left(record: RunRecord) -> None:
    """Stop a run left training by a failed test: taken from its watcher, stopped."""
    from dtgui.launch.start.pipeline import reattach

    if stop_watcher(record):
        run = reattach(RunRecord.load(Path(record.bundle)))
        run.request_stop()
        run.wait(60)


def test_two_runs_from_one_window_are_followed_to_their_ends(
        qtbot: QtBot, window: MainWindow, stub_python: Callable[..., str]) -> None:
    python = stub_python(step_seconds=0.02)
    window.launch(cpu_plan("first", python, 100_000))  # ended by the test: no race
    qtbot.waitUntil(lambda: window.session.source is not None, timeout=60_000)
    first = window.session
    # launching stays available while the run trains
    assert all(w.isEnabled() for w in (window.acts.new, window.acts.demo, window.acts.sweep,
                                       window.home.train_demo, window.home.new_run))
    window.launch(cpu_plan("second", python, 100))
    qtbot.waitUntil(lambda: window.session is not first and window.session.source is not None,
                    timeout=60_000)
    second = window.session
    assert window.runs.live() == [first, second]
    dash = dashboard_of(window)
    assert dash.controller is controller(second)
    switcher = dash.findChild(RunSwitcher)
    assert switcher is not None and switcher.isVisibleTo(window) and switcher.count() == 2
    assert "first" in switcher.tabText(0) and "second" in switcher.tabText(1)

    # switched to the first run: drawn from its own curves, which it kept meanwhile
    qtbot.waitUntil(lambda: controller(first).metrics.progress().done >= 20, timeout=60_000)
    switcher.setCurrentIndex(0)
    assert window.session is first and dash.controller is controller(first)
    qtbot.waitUntil(lambda: len(dash.loss_panel.curves.shown_data(0)[0]) >= 4, timeout=30_000)

    # the Runs page: the first run's row followed here and moving, without Refresh
    window.show_runs()
    qtbot.waitUntil(lambda: state_of(window, "first") == "running · followed"
                    and row_cells(window, "second") is not None, timeout=30_000)
    generation = window.runs_page._generation
    steps_seen: set[str] = set()

    def moved() -> bool:
        steps_seen.add((row_cells(window, "first") or ("", ""))[1])
        return len(steps_seen - {""}) >= 2

    qtbot.waitUntil(moved, timeout=30_000)
    qtbot.waitUntil(lambda: duration_of(window, "first").endswith(" left"), timeout=30_000)
    first.request_stop()
    qtbot.waitUntil(lambda: not window.runs.live(), timeout=120_000)
    assert (controller(first).state, controller(second).state) == ("stopped", "finished")
    titles = [title for title, _text in window.run_notices.notifier.history]
    assert titles.count("second finished") == 1  # not shown when it ended: notified
    # the rows say it too, still without Refresh
    qtbot.waitUntil(lambda: state_of(window, "first") == "stopped"
                    and state_of(window, "second") == "finished", timeout=30_000)
    assert row_cells(window, "second") == ("finished", "100")
    assert window.runs_page._generation == generation


def test_a_run_queued_from_the_window_starts_after_the_run_it_waits_for(
        qtbot: QtBot, window: MainWindow, stub_python: Callable[..., str]) -> None:
    python = stub_python(step_seconds=0.02)
    window.launch(cpu_plan("ahead", python, 100_000))  # ended by the test: no race
    qtbot.waitUntil(lambda: window.session.source is not None
                    and window.session.source.state == "running", timeout=60_000)
    ahead = controller(window.session)
    window.queue_run(cpu_plan("behind", python, 100_000))
    qtbot.waitUntil(lambda: any(q.entry.name == "behind" and "run ahead" in q.text
                                for q in queued_runs()), timeout=60_000)
    assert not ahead.finished  # it waits while the window's run trains
    window.session.request_stop()
    qtbot.waitUntil(lambda: ahead.finished, timeout=60_000)
    started: RunRecord | None = None

    def behind_started() -> bool:
        nonlocal started
        started = next((r for r in RunHistory().running() if r.run_name == "behind"), None)
        return started is not None

    qtbot.waitUntil(behind_started, timeout=60_000)
    assert started is not None and ahead.record is not None
    ended = RunRecord.load(Path(ahead.record.bundle)).ended
    assert ended is not None and started.created >= ended
    # queued by this window: followed by it once started, as its own launches are, and no
    # word of runs that "kept training while dtgui was closed"
    window.show_runs()
    qtbot.waitUntil(lambda: window.session.source is not None
                    and window.session.source.run_name == "behind", timeout=60_000)
    assert "closed" not in window.statusBar().currentMessage()
    # the Runs page shows it training, its steps moving without Refresh
    window.show_runs()
    qtbot.waitUntil(lambda: state_of(window, "behind").startswith("running"),
                    timeout=60_000)
    steps_seen: set[str] = set()

    def moved() -> bool:
        steps_seen.add((row_cells(window, "behind") or ("", ""))[1])
        return len(steps_seen - {""}) >= 2

    qtbot.waitUntil(moved, timeout=30_000)

    # stopped from the window
    with qtbot.waitSignal(window.runs.runEnded, timeout=60_000):
        window.session.request_stop()
    assert controller(window.session).state == "stopped"


def test_runs_not_shown_are_read_less_and_closing_asks_once_for_all(qtbot: QtBot,
                                                              window: MainWindow) -> None:
    runs = [FakeRun(plan=Plan(run_name=name), path=name) for name in ("one", "two", "three")]
    for run in runs:
        window.runs.new().show(run)
    assert len(window.runs.live()) == 3 and window.session.source is runs[-1]
    # the runs not shown are read less often; switching shows one and reads it closely
    assert [r.closely for r in runs] == [False, False, True]
    window.runs.show(window.runs.sessions[0])
    assert [r.closely for r in runs] == [True, False, False]
    assert dashboard_of(window).controller is runs[0]
    # two runs wait in the queue: they start after dtgui closes, and the question says so
    window.queue_panel.runs = [QueuedRun(QueueEntry(f"q{i}", {"run_name": f"later{i}"}), i)
                               for i in (1, 2)]
    questions: list[str] = []
    texts: list[str] = []
    answer_question(qtbot, "Stop and quit", questions, texts)
    window.close()
    assert questions == ["3 runs are still training"]
    assert ("2 queued runs will start when their machines are free, also after dtgui has "
            "closed; cancel them on the Runs page.") in texts[0]
    assert [r.stop_calls for r in runs] == [1, 1, 1]
    runs[0].end("stopped")
    runs[1].end("stopped")
    qtbot.waitUntil(lambda: len(window.runs.live()) == 1, timeout=10_000)
    assert window.isVisible()  # one still stopping
    runs[2].end("stopped")
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=10_000)
    assert questions == ["3 runs are still training"]


def test_a_running_runs_progress_is_read_from_its_new_lines_only(tmp_path: Path) -> None:
    events = tmp_path / "output" / "events-worker-0.jsonl"
    events.parent.mkdir()

    def write(*lines: dict[str, object]) -> None:
        with open(events, "a", encoding="utf-8") as f:
            for line in lines:
                f.write(json.dumps({"v": 2, "task": "worker:0", **line}) + "\n")

    def steps(first: int, t: float) -> dict[str, object]:
        fields = steps_fields(first, step_losses(first, 10))
        return {"kind": "steps", "t": t, **fields}

    write({"kind": "started", "t": 100.0, "steps": 100}, steps(1, 110.0))
    reader = EventsProgress(tmp_path)
    reader.read()
    progress = reader.progress()
    assert (progress.done, progress.total, progress.seconds_left()) == (10, 100, 90.0)
    assert reader.loss is not None and reader.loss > 0
    assert read_live(str(tmp_path), reader).best_val is None  # nothing validated yet
    # validation seen while it trains: the best so far (the loss's; lower is better)
    write({"kind": "validation", "t": 111.0, "step": 5, "loss": 0.4,
           "metrics": {"accuracy": 0.7}},
          {"kind": "validation", "t": 112.0, "step": 10, "loss": 0.5,
           "metrics": {"accuracy": 0.8}})
    assert read_live(str(tmp_path), reader).best_val == ("val_loss", 0.4)
    assert reader.validation == {"loss": 0.4, "accuracy": 0.8}  # accuracy: higher is better
    read = events.stat().st_size
    write(steps(11, 120.0))
    with open(events, "a", encoding="utf-8") as f:
        f.write('{"v": 2, "task": "worker:0", "kind": "st')  # a line half written
    reader.read()
    assert reader.tails[events].offset > read  # on from where it was
    assert (reader.progress().done, reader.progress().seconds_left()) == (20, 80.0)

    # a long run's file: only its end is read, paced from the record's start
    long_run = EventsProgress(tmp_path / "long")
    (tmp_path / "long" / "output").mkdir(parents=True)
    lines = [json.dumps({"v": 2, "task": "worker:0", **steps(s, 100.0 + s)})
             for s in range(1, 30_001, 10)]
    (tmp_path / "long" / "output" / "events-worker-0.jsonl").write_text("\n".join(lines) + "\n")
    assert recent_offset(tmp_path / "long" / "output" / "events-worker-0.jsonl") > 0
    long_run.read()
    progress = long_run.progress(started=1.0)
    assert progress.done == 30_000 and progress.started_at == 1.0


def test_the_first_runs_end_is_notified_once(qtbot: QtBot, window: MainWindow) -> None:
    run = FakeRun(plan=Plan(run_name="solo"), path="solo")
    window.session.show(run)  # the window's first session: made before any listener
    run.end("finished", final_loss=0.5)
    qtbot.waitUntil(lambda: not window.runs.live(), timeout=10_000)
    titles = [title for title, _text in window.run_notices.notifier.history]
    assert titles == ["solo finished"]


def test_a_followed_runs_row_shows_its_best_validation_and_its_end_at_once(
        qtbot: QtBot, window: MainWindow, tmp_path: Path) -> None:
    """A run followed here: its row's Best val. is its best so far while it trains, and the
    row says the run ended when its session says it (not at a later look at its files)."""
    run = FakeRun(plan=Plan(run_name="quick", steps=100), path=tmp_path / "quick")
    window.runs.new().show(run)
    page = window.runs_page
    qtbot.waitUntil(lambda: page._generation >= 1, timeout=10_000)  # the window's first read
    with qtbot.waitSignal(page.loaded, timeout=60_000):  # the last read of the list
        window.show_runs()
    page.show_rows([RunRow(folder=str(tmp_path / "quick"), name="quick", state="running",
                           active=True, started=time.time() - 5, total_steps=100)])
    qtbot.waitUntil(lambda: state_of(window, "quick") == "running · followed", timeout=10_000)
    assert cell_of(window, "quick", BEST_VAL) == ""
    run.metrics.add_events([
        event("validation", step=10, loss=0.5, metrics={"accuracy": 0.6}),
        event("validation", step=20, loss=0.25, metrics={"accuracy": 0.7}),
        event("validation", step=30, loss=0.375, metrics={"accuracy": 0.8})])
    qtbot.waitUntil(lambda: cell_of(window, "quick", BEST_VAL) == "0.25", timeout=10_000)
    assert "so far" in str(page.proxy.index(0, BEST_VAL).data(Qt.ItemDataRole.ToolTipRole))

    at_end: list[str] = []  # the row when the run's end is told (after the window's own)
    window.runs.runEnded.connect(lambda _session: at_end.append(state_of(window, "quick")))
    run.end("finished", final_loss=0.125)
    qtbot.waitUntil(lambda: bool(at_end), timeout=10_000)
    assert at_end == ["finished"]
    assert cell_of(window, "quick", FINAL_LOSS) == "0.125"
    assert "1 run(s) still training" not in page.summary.text()


def test_an_ended_runs_tab_stays_until_it_is_closed(qtbot: QtBot, window: MainWindow) -> None:
    runs = [FakeRun(plan=Plan(run_name=name), path=name) for name in ("done", "going")]
    for run in runs:
        window.runs.new().show(run)
    done, going = window.runs.sessions[0], window.runs.sessions[1]
    switcher = dashboard_of(window).findChild(RunSwitcher)
    assert switcher is not None
    runs[0].end("finished")
    qtbot.waitUntil(lambda: not done.following, timeout=10_000)
    window.runs.show(done)
    window.runs.show(going)  # another tab clicked: the ended run's tab stays
    assert switcher.count() == 2 and "done · finished" in switcher.tabText(0)
    side = switcher._close_side()
    closer = switcher.tabButton(0, side)
    assert isinstance(closer, QAbstractButton) and not closer.isHidden()  # it closes
    live_closer = switcher.tabButton(1, side)
    assert live_closer is None or live_closer.isHidden()  # a live run's does not
    # opened again from the Runs page: its tab is shown, not a second one made
    assert done.source is not None
    window._open_run(RunRecord("done-1", "done", str(done.source.bundle.path)))
    assert window.session is done and window.runs.sessions == [done, going]
    closer.click()
    assert window.runs.sessions == [going] and switcher.count() == 1
    assert window.session is going
    # closed while shown: the run next to it is shown
    window.runs.new().show(runs[0])
    reopened = window.runs.sessions[-1]
    qtbot.waitUntil(lambda: not reopened.following, timeout=10_000)
    window.runs.show(reopened)
    window.runs.close(reopened)
    assert window.session is going and window.runs.sessions == [going]
    window.runs.close(going)  # a run still followed is never closed here
    assert window.runs.sessions == [going]
    runs[1].end("stopped")
