"""Open in MLflow / TensorBoard, its window side: the address always shown and copyable
whether a browser opened or not, a start that fails said with what to do, and the Runs
page's and a run's dashboard's entries. (The real MLflow server: tests/test_mlflow.py; a real
TensorBoard's profile plugin here.)"""

from __future__ import annotations

import gzip
import json
import sys
import threading
import time
import urllib.request
import webbrowser
from collections.abc import Callable
from pathlib import Path

import pytest
from PySide6.QtGui import QFontMetrics, QGuiApplication
from PySide6.QtWidgets import QMenu, QWidget
from pytestqt.qtbot import QtBot

from dtgui.core.runs.records import RunRecord
from dtgui.core.runs.run_state import RunState
from dtgui.launch.trackers import local_server, mlflow_ui, tensorboard_server
from dtgui.launch.trackers.local_server import ServerError
from dtgui.launch.trackers.mlflow_ui import install_command, start_ui
from dtgui.ui.dialogs.server_link import open_service
from dtgui.ui.pages.runs_model import NAME
from dtgui.ui.pages.runs_page import RunsPage

pytestmark = pytest.mark.gui
URL = "http://127.0.0.1:5999/#/runs/abc"


def test_the_address_is_shown_with_copy_with_or_without_a_browser(
        qtbot: QtBot, monkeypatch: pytest.MonkeyPatch) -> None:
    parent = QWidget()
    qtbot.addWidget(parent)
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    parent.resize(1366, 700)
    parent.show()
    dialog = open_service(parent, "MLflow", lambda say: URL)
    assert dialog.isVisible() and "Starting MLflow" in dialog.status.text()
    # at the top right of the window (its toolbar and the run's header), not over the
    # middle where the loss plot is
    window = parent.geometry()
    assert dialog.y() <= window.top() + 20 and dialog.frameGeometry().right() <= window.right()
    assert dialog.frameGeometry().bottom() < window.center().y()
    qtbot.waitUntil(lambda: dialog.url.text() == URL, timeout=30_000)
    assert "No browser could be asked" in dialog.status.text()
    assert dialog.url.toolTip() == URL  # the whole address, however wide the field
    long_address = QFontMetrics(dialog.url.font()).horizontalAdvance(
        "http://127.0.0.1:43467/#/experiments/1/runs/6d8f0c1e2b3a4f5e9d7c")
    assert dialog.url.width() > long_address  # room for most of a run's address
    assert not dialog.note.isVisibleTo(dialog) and not dialog.export_button.isVisibleTo(dialog)
    dialog.copy_button.click()
    assert QGuiApplication.clipboard().text() == URL

    # a desktop whose browser says yes (xdg-open does with none): the address stays shown
    asked: list[str] = []
    monkeypatch.setenv("DISPLAY", ":99")

    def browser(url: str) -> bool:
        asked.append(url)
        return True

    monkeypatch.setattr(webbrowser, "open", browser)
    again = open_service(parent, "MLflow", lambda say: URL)
    assert again is dialog  # one dialog a service
    qtbot.waitUntil(lambda: dialog.url.text() == URL and asked == [URL], timeout=30_000)
    assert "if no page opened, copy this address" in dialog.status.text()


def test_a_start_that_fails_says_why_and_what_installs_it(
        qtbot: QtBot, monkeypatch: pytest.MonkeyPatch) -> None:
    parent = QWidget()
    qtbot.addWidget(parent)

    def missing(say: Callable[[str], None]) -> str:
        return start_ui("sqlite:////nowhere/mlflow.db", say)

    monkeypatch.setattr(mlflow_ui, "ui_program", lambda: None)
    dialog = open_service(parent, "MLflow", missing)
    qtbot.waitUntil(lambda: "could not be opened" in dialog.status.text(), timeout=30_000)
    assert "MLflow's UI is not installed" in dialog.status.text()
    command = dialog.url.text()  # the one command, to copy
    assert command == install_command() and "/bin/pip install 'mlflow==" in command
    assert command.startswith("python3 -m venv ")
    dialog.copy_button.click()
    assert QGuiApplication.clipboard().text() == command
    assert not dialog.open_button.isEnabled()


def test_the_runs_page_opens_a_run_in_mlflow(qtbot: QtBot) -> None:
    from dtgui.core.plans.placement import place_local
    from dtgui.core.plans.plan import Plan
    from dtgui.core.plans.strategies import Strategy
    from dtgui.core.runs.records import RunRecord
    from dtgui.core.runs.run_state import RunState
    from dtgui.core.settings import runs_dir

    folder = runs_dir() / "done"
    folder.mkdir(parents=True)
    (folder / "plan.json").write_text(json.dumps(place_local(Plan(
        run_name="done", strategy=Strategy.ONE_DEVICE)).to_dict()))
    RunRecord("done-1", "done", str(folder), "one_device", created=time.time(),
              state=RunState.FINISHED).save()
    page = RunsPage()
    qtbot.addWidget(page)
    page.refresh()
    qtbot.waitUntil(lambda: page.row_count() == 1, timeout=30_000)
    page._menu(page.table.visualRect(page.proxy.index(0, NAME)).center())
    menu = page.findChildren(QMenu)[-1]
    action = next(a for a in menu.actions() if a.text() == "Open in MLflow")
    with qtbot.waitSignal(page.mlflowOpenRequested) as got:
        action.trigger()
    assert got.args == [Path(folder)]
    menu.close()


def test_the_toolbars_tensorboard_reads_every_run_each_once(tmp_path: Path) -> None:
    from dtgui.core.runs.records import RECORD_NAME, remember_run, remember_sweep
    from dtgui.core.settings import runs_dir
    from dtgui.launch.trackers.tensorboard_server import every_run_folder, logdir_spec

    inside = runs_dir() / "sweep-in-runs"  # read with the runs folder
    elsewhere = tmp_path / "sweeps" / "lr"
    bundle = tmp_path / "bundles" / "lr"  # a run elsewhere, of the same folder name
    for folder in (inside, elsewhere, bundle):
        folder.mkdir(parents=True)
    (bundle / RECORD_NAME).write_text("{}")
    for sweep in (inside, elsewhere, elsewhere):
        remember_sweep(sweep)
    remember_run(bundle)
    found = every_run_folder()
    assert found == [runs_dir().resolve(), elsewhere.resolve(), bundle.resolve()]
    assert logdir_spec(found) == f"runs:{found[0]},lr:{found[1]},lr-2:{found[2]}"


def test_a_run_never_sent_is_sent_before_it_is_opened_and_one_training_is_said(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dtgui.core.runs.records import RunRecord
    from dtgui.core.runs.run_state import RunState
    from dtgui.core.tracking import embedded_uri
    from dtgui.launch.trackers import mlflow_runs

    sent: list[tuple[str, str]] = []

    def send(record: RunRecord, uri: str) -> str:
        sent.append((record.run_id, uri))
        return "new-id"

    class Store:  # MLflow's client over a store that has only the run "kept"
        def __init__(self, tracking_uri: str) -> None:
            self.uri = tracking_uri

        def get_run(self, run_id: str) -> object:
            if run_id != "kept":
                raise LookupError(run_id)
            return object()

    monkeypatch.setattr(mlflow_runs, "send_past_run", send)
    kept = RunRecord("r1", "one", "/r1", state=RunState.FINISHED, mlflow_run_id="kept",
                     mlflow_uri="sqlite:////s/mlflow.db")
    assert mlflow_ui._sent(kept, Store) == ("sqlite:////s/mlflow.db", "kept") and not sent
    never = RunRecord("r2", "two", "/r2", state=RunState.FINISHED)
    assert mlflow_ui._sent(never, Store) == (embedded_uri(), "new-id")
    assert sent == [("r2", embedded_uri())]
    training = RunRecord("r3", "three", "/r3", state=RunState.RUNNING)
    with pytest.raises(ServerError, match="not sent to MLflow while it trains"):
        mlflow_ui._sent(training, Store)


def test_a_slow_start_says_what_it_does_and_the_seconds_so_far(qtbot: QtBot) -> None:
    parent = QWidget()
    qtbot.addWidget(parent)
    go_on = threading.Event()

    def slow(say: Callable[[str], None]) -> str:
        say("Starting MLflow's UI on this machine")
        go_on.wait(60)
        return URL

    dialog = open_service(parent, "MLflow", slow)
    try:
        qtbot.waitUntil(lambda: dialog.status.text().startswith(
            "Starting MLflow's UI on this machine… "), timeout=30_000)
        first = dialog.status.text()
        qtbot.waitUntil(lambda: dialog.status.text() != first, timeout=30_000)  # each second
        assert dialog.status.text().endswith(" s")
    finally:
        go_on.set()
    qtbot.waitUntil(lambda: dialog.url.text() == URL, timeout=30_000)
    assert "is at this address" in dialog.status.text()


def test_an_empty_mlflow_says_why_and_offers_to_send_the_runs(
        qtbot: QtBot, monkeypatch: pytest.MonkeyPatch) -> None:
    """The toolbar's MLflow with sending off (the default) and no run sent: the dialog says
    so, where to turn it on, and a button exports the ended runs it lists."""
    from dtgui.ui.dialogs import preferences

    class EmptyStore:  # MLflow's client over a store without dtgui's experiment
        def get_experiment_by_name(self, name: str) -> None:
            return None

    done = RunRecord("d1", "done", "/d1", state=RunState.FINISHED)
    training = RunRecord("t1", "training", "/t1", state=RunState.RUNNING)
    page = mlflow_ui.overview(URL, EmptyStore(), "sqlite:////s/mlflow.db", [done, training])
    assert page.url == URL and page.unsent == [done]
    assert "Runs are not sent to MLflow (it is off by default)" in page.note
    assert "Preferences > MLflow" in page.note and '"Export to MLflow"' in page.note

    exported: list[list[RunRecord]] = []
    monkeypatch.setattr(preferences, "export_to_mlflow",
                        lambda parent, records: exported.append(list(records)))
    parent = QWidget()
    qtbot.addWidget(parent)
    dialog = open_service(parent, "MLflow", lambda say: page)
    qtbot.waitUntil(lambda: dialog.url.text() == URL, timeout=30_000)
    assert dialog.note.isVisibleTo(dialog) and dialog.note.text() == page.note
    assert dialog.export_button.isVisibleTo(dialog)
    assert dialog.export_button.text() == "Export 1 run(s) to MLflow"
    dialog.export_button.click()
    assert exported == [[done]]


def test_each_tensorboard_stays_up_to_a_few_the_oldest_stopped_first(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A second TensorBoard on other folders starts beside the first (a page open on it
    keeps working); past KEEP the least recently asked for stops. Each run is named by its
    folder, a single run's too. (Cheap servers stand in for TensorBoard.)"""
    started: list[list[str]] = []
    real_start = local_server.start_server

    def start(key: str, command: list[str], port_args: Callable[[int], list[str]],
              **kwargs: object) -> local_server.LocalServer:
        started.append(list(command))
        return real_start(key, [sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                                "--directory", str(tmp_path)], lambda p: [str(p)],
                          name="a stand-in")

    monkeypatch.setattr(tensorboard_server, "start_server", start)
    monkeypatch.setattr(tensorboard_server, "KEEP", 2)
    folders = [tmp_path / n for n in ("run-a", "run-b", "run-c")]
    for folder in folders:
        (folder / tensorboard_server.TB_DIR).mkdir(parents=True)
    try:
        a = tensorboard_server.start_tensorboard([folders[0]])
        # one run: its own folder as the logdir, which the profile plugin reads
        assert started[0][-2:] == ["--logdir", str(folders[0] / tensorboard_server.TB_DIR)]
        b = tensorboard_server.start_tensorboard([folders[1]])
        assert a.running and b.running and a.url != b.url
        assert tensorboard_server.start_tensorboard([folders[0]]) is a  # reused: the newest
        c = tensorboard_server.start_tensorboard([folders[2]])
        assert a.running and c.running
        assert not b.running  # the least recently asked for
        both = tensorboard_server.start_tensorboard(folders[:2])  # compared: each by its name
        assert started[-1][-2:] == ["--logdir_spec", f"run-a:{folders[0] / tensorboard_server.TB_DIR},"
                                    f"run-b:{folders[1] / tensorboard_server.TB_DIR}"]
        assert both.running
    finally:
        tensorboard_server.stop_tensorboard()
    assert not (a.running or c.running)


def test_a_runs_profile_is_listed_by_the_tensorboard_dtgui_starts(tmp_path: Path) -> None:
    """The real TensorBoard on one run: its profile plugin lists each task's session (it reads
    only a plain logdir), and it starts without TensorFlow."""
    tb = tmp_path / "run-a" / tensorboard_server.TB_DIR
    for task in ("worker-0", "worker-1"):  # the plugin lists sessions by their folders
        session = tb / task / "plugins" / "profile" / "2026_11_29_08_19_54"
        session.mkdir(parents=True)
        (session / "vm.xplane.pb").write_bytes(b"")
    try:
        server = tensorboard_server.start_tensorboard([tmp_path / "run-a"])
        with urllib.request.urlopen(server.url + "data/plugin/profile/runs", timeout=60) as got:
            body = got.read()
        if got.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        assert sorted(json.loads(body)) == ["worker-0/2026_11_29_08_19_54",
                                            "worker-1/2026_11_29_08_19_54"]
        assert "TensorFlow installation not found" in server.log.read_text()
    finally:
        tensorboard_server.stop_tensorboard()
