"""Home after a restart: a run that kept training while dtgui was closed is named with a
Reattach button, a run that ended meanwhile with an Open button; the time the window closed
is remembered for the next start."""

from __future__ import annotations

import time

import pytest
from pytestqt.qtbot import QtBot

from dtgui.core.runs.run_index import RunRow
from dtgui.core.settings import last_closed, remember_closed
from dtgui.ui.main_window import MainWindow
from dtgui.ui.pages.local_machine import LocalMachinePanel

pytestmark = pytest.mark.gui


@pytest.fixture
def window(qtbot: QtBot, monkeypatch: pytest.MonkeyPatch) -> MainWindow:
    monkeypatch.setattr(LocalMachinePanel, "refresh", lambda self: None)  # no TensorFlow probe
    made = MainWindow()
    qtbot.addWidget(made)
    made.show()
    return made


def test_home_names_a_run_still_training_and_reattaches_it(
        qtbot: QtBot, window: MainWindow, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[list[str]] = []
    monkeypatch.setattr(window.runs_page, "reattach_rows",
                        lambda rows: asked.append([r.name for r in rows]))
    kept = RunRow(folder="/runs/long", name="long-run", state="running", active=True,
                  started=window._opened - 600)
    window._announce_running([kept])
    assert window.home.notice.isVisible()
    assert "1 run is still training" in window.home.notice_text.text()
    assert "long-run" in window.home.notice_text.text()
    assert "closed" in window.home.notice_text.text()
    assert window.home.notice_button.text() == "Reattach"
    window.home.notice_button.click()
    assert asked == [["long-run"]]
    assert not window.home.notice.isVisible()
    window._announce_running([])  # followed now: nothing more to say
    assert not window.home.notice.isVisible()


def test_home_names_a_run_that_ended_while_dtgui_was_closed(
        qtbot: QtBot, window: MainWindow, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[list[str]] = []
    monkeypatch.setattr(window.runs_page, "open_rows",
                        lambda rows: opened.append([r.name for r in rows]))
    window._closed_before = window._opened - 100
    before = RunRow(folder="/runs/a", name="seen-before", state="finished",
                    started=window._opened - 500, ended=window._opened - 400)
    meanwhile = RunRow(folder="/runs/b", name="long-run", state="finished",
                       started=window._opened - 300, ended=window._opened - 50)
    window._announce_running([before, meanwhile])
    text = window.home.notice_text.text()
    assert "1 run ended while dtgui was closed" in text and "long-run (finished)" in text
    assert "seen-before" not in text
    window.home.notice_button.click()
    assert opened == [["long-run"]]
    window._announce_running([before, meanwhile])  # told once, not at each refresh
    assert not window.home.notice.isVisible()


def test_closing_the_window_remembers_when() -> None:
    remember_closed(1234.5)
    assert last_closed() == 1234.5
    before = time.time()
    remember_closed()
    assert last_closed() >= before - 1
