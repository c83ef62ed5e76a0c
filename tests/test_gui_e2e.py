"""The whole one-machine flow through the real GUI: wizard -> live Mirrored run -> Stop.

Real widgets (pytest-qt), real TensorFlow worker processes, real signals; nothing faked.
"""

from __future__ import annotations

import time

import pytest
from fakes import wait_for
from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QWizard
from pytestqt.qtbot import QtBot
from runs import live_members
from widgets import click_stop, controller_of, dashboard_of

from dtgui.ui.app import make_app
from dtgui.ui.main_window import MainWindow
from dtgui.ui.wizard.wizard import RunWizard

pytestmark = [pytest.mark.slow, pytest.mark.gui]
LEFT = Qt.MouseButton.LeftButton


def click_next(qtbot: QtBot, wizard: QWizard) -> None:
    before = wizard.currentId()
    button = wizard.button(QWizard.WizardButton.NextButton)
    assert button.isEnabled(), wizard.currentPage().findChildren(QObject)
    qtbot.mouseClick(button, LEFT)
    assert wizard.currentId() == before + 1


def open_wizard_on(qtbot: QtBot, window: MainWindow, strategy: str) -> RunWizard:
    """Click New run, then the strategy in the list; returns the wizard."""
    qtbot.mouseClick(window.home.new_run, LEFT)
    qtbot.waitUntil(lambda: window.wizard is not None and window.wizard.isVisible(), timeout=5000)
    wizard = window.wizard
    assert wizard is not None
    strategies = wizard.strategy_page.strategy_list
    for row in range(strategies.count()):
        item = strategies.item(row)
        if item is not None and item.data(Qt.ItemDataRole.UserRole) == strategy:
            qtbot.mouseClick(strategies.viewport(), LEFT,
                             pos=strategies.visualItemRect(item).center())
    assert wizard.strategy_page.strategy() == strategy
    return wizard


def curve_points(window: MainWindow, rid: int) -> int:
    curves = dashboard_of(window).loss_panel.curves
    return len(curves.shown_data(rid)[0]) if rid in curves.raw else 0


def test_wizard_to_a_live_mirrored_run_then_stop_leaves_nothing(qtbot: QtBot) -> None:
    make_app([])
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    wizard = open_wizard_on(qtbot, window, "mirrored")
    wizard.strategy_page.replicas_spin.setValue(2)
    click_next(qtbot, wizard)
    options = wizard.options_page
    options.steps_spin.setValue(100000)  # long enough to be stopped by hand
    options.checkpoint_spin.setValue(0)
    assert options.global_label.text().startswith("64 = 32 × 2")
    click_next(qtbot, wizard)  # model: the demo
    click_next(qtbot, wizard)  # review
    assert wizard.review_page.task_list.count() == 1
    with qtbot.waitSignal(wizard.accepted, timeout=60_000):
        qtbot.mouseClick(wizard.button(QWizard.WizardButton.FinishButton), LEFT)

    qtbot.waitUntil(lambda: window.session.source is not None, timeout=240_000)
    assert window.pages.currentWidget() is window.dashboard
    # Two replica curves with data, drawn by the dashboard's own timer.
    dashboard = dashboard_of(window)
    qtbot.waitUntil(lambda: dashboard.loss_panel.replica_ids() == [0, 1], timeout=120000)
    qtbot.waitUntil(lambda: min(curve_points(window, 0), curve_points(window, 1)) >= 5,
                    timeout=60000)
    controller = controller_of(window)
    assert controller.state == "running"
    # The UI stays responsive while training: events keep being processed. A UI thread held by
    # the training (waiting on it, reading its output) is held for as long as it trains (100000
    # steps); the dashboard's own frames take a fraction of this bound on a loaded machine.
    started = time.monotonic()
    qtbot.wait(200)
    assert time.monotonic() - started < 10

    stop = dashboard.header.stop_button
    # the tasks' save grace (30 s) and the SIGKILL after it bound a stop
    with qtbot.waitSignal(window.session.ended, timeout=120_000) as ended:
        click_stop(qtbot, stop)
    assert ended.args[0] == "stopped"
    assert controller.state == "stopped"
    wait_for(lambda: live_members(controller.pgids()) == [], 60,
             f"left running: {live_members(controller.pgids())}")
    assert window.home.train_demo.isEnabled()  # ready for the next run
    window.close()
