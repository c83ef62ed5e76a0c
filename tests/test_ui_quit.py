"""Ctrl+Q quits dtgui as closing its window does: at once when idle (exit code 0), and with
the same "keep training / stop" question while a run is active. Real widgets (pytest-qt), a
real training run, and the real `dtgui` entry point in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from fakes import FakeRun
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot
from runs import live_members
from widgets import answer_question

import dtgui.ui.home_page as home_page
from dtgui.core.plans.plan import Plan
from dtgui.launch.controller import RunController
from dtgui.ui.main_window import MainWindow
from dtgui.ui.run_session import LIFE_MS

pytestmark = pytest.mark.gui

# Presses Ctrl+Q in the main window once it is up, then lets dtgui's own main() return.
PRESS_CTRL_Q = """
import sys
import time
from PySide6.QtCore import Qt, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication
from dtgui.cli import main
from dtgui.ui.app import make_app

make_app([])

def press():
    shown = [w for w in QApplication.topLevelWidgets()
             if type(w).__name__ == "MainWindow" and w.isVisible()]
    if not shown:
        QTimer.singleShot(100, press)
        return
    QTest.qWaitForWindowExposed(shown[0], 5000)
    shown[0].activateWindow()
    QTest.qWaitForWindowActive(shown[0], 5000)
    print(f"pressed at {time.monotonic()}", file=sys.stderr, flush=True)
    QTest.keyClick(shown[0], Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)

QTimer.singleShot(200, press)
sys.exit(main([]))
"""


def test_ctrl_q_quits_the_app_with_exit_code_0() -> None:
    # the app's start is the machine's time (minutes on a loaded one): the quit is timed from
    # the key press (the monotonic clock is the machine's, the same in both processes)
    proc = subprocess.run([sys.executable, "-c", PRESS_CTRL_Q], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    ended = time.monotonic()
    assert proc.returncode == 0, proc.stderr[-2000:]
    (pressed,) = [float(line.split()[-1]) for line in proc.stderr.splitlines()
                  if line.startswith("pressed at ")]
    assert ended - pressed < 60  # at once: an idle app waits for nothing


def press_ctrl_q(window: MainWindow) -> None:
    """Ctrl+Q as a person presses it: in the active window (a window shortcut)."""
    assert QTest.qWaitForWindowExposed(window, 5000)
    window.activateWindow()
    assert QTest.qWaitForWindowActive(window, 5000)
    QTest.keyClick(window, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)


@pytest.mark.slow
def test_ctrl_q_during_a_run_asks_keep_or_stop_and_stop_quits_leaving_nothing(
        qtbot: QtBot, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(home_page, "DEMO_STEPS", 1_000_000)  # still training when asked
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    press_ctrl_q(window)  # idle: closes at once
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=5000)

    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    window.train_demo()
    qtbot.waitUntil(lambda: window.session.source is not None
                    and window.session.source.state == "running", timeout=120_000)
    controller = window.session.source
    assert isinstance(controller, RunController)  # the demo runs here, under a controller
    questions: list[str] = []

    answer_question(qtbot, "Cancel", questions)
    press_ctrl_q(window)
    assert questions == ["A run is still training"]
    assert window.isVisible() and controller.state == "running"

    answer_question(qtbot, "Stop and quit", questions)
    press_ctrl_q(window)
    assert questions == ["A run is still training"] * 2
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=60_000)
    assert controller.state == "stopped"
    time.sleep(0.5)
    assert live_members(controller.pgids()) == []


def test_stop_and_quit_quits_when_the_session_tells_the_end_with_no_view_watching(
        qtbot: QtBot) -> None:
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    run = FakeRun(plan=Plan(run_name="quit-me"))
    window.session.show(run)
    dashboard = window.dashboard
    assert dashboard is not None and window.pages.currentWidget() is dashboard
    dashboard.detach()  # no view's timer follows the run any more: only the session does
    ended: list[str] = []
    window.session.ended.connect(lambda state, _message: ended.append(state))
    questions: list[str] = []

    answer_question(qtbot, "Stop and quit", questions)
    window.close()
    assert questions == ["A run is still training"] and run.stop_calls == 1
    qtbot.wait(3 * LIFE_MS)
    assert window.isVisible()  # still stopping: dtgui waits for the end
    run.end("stopped", "stopped by the user")
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=10_000)
    assert ended == ["stopped"] and not dashboard.timer.isActive()
    assert questions == ["A run is still training"]  # the end closed it: no second question
