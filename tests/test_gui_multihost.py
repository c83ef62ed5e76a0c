"""Several machines through the real GUI: two registered machines picked in the wizard, 4 replica curves
live, both machines' device use, Stop, nothing left anywhere.

Real sshd hosts in network namespaces, tasks started over SSH under the real supervisor with
the stub training child (tests/stub_task.py: per-replica losses as the training loop writes
them, no TensorFlow; MultiWorkerMirrored over SSH trains for real in tests/test_multihost.py),
real dialogs clicked with pytest-qt. One machine signs in with a key whose host key is already trusted; the
other with a password that is nowhere yet and a host key dtgui has never seen: the launch
itself asks for both, with the same dialogs as the Machines panel.

On CPU, TensorFlow's MultiWorkerMirrored runs one replica per worker process, so 4 replicas on
2 machines are 4 workers, two on each.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import conftest_ssh
import pytest
import shiboken6
import sshhosts
from conftest_ssh import machine, trust
from fakes import wait_for
from PySide6.QtCore import QCoreApplication, QEvent, Qt, QThreadPool, QTimer
from PySide6.QtWidgets import QApplication, QComboBox, QDialog, QMessageBox, QWidget, QWizard
from pytestqt.qtbot import QtBot
from runs import live_members, replica_losses
from test_gui_e2e import click_next, curve_points, open_wizard_on
from widgets import (
    click_stop,
    controller_of,
    dashboard_of,
    ready_window,
    stop_with_the_button,
)

from dtgui.core.machines.registry import MachineRegistry
from dtgui.core.plans.placement import place_on_machines
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.records import RunHistory, RunRecord
from dtgui.launch.controller import RunController
from dtgui.launch.start.watcher import stop_watcher, watcher_pid
from dtgui.ui.machines.hostkey_dialog import HostKeyDialog
from dtgui.ui.machines.secret_prompt import SecretPrompt
from dtgui.ui.main_window import MainWindow
from dtgui.ui.pages.runs_model import STATE

ssh_lab, ssh_env, real_keyring = conftest_ssh.ssh_lab, conftest_ssh.ssh_env, conftest_ssh.real_keyring
lab_python = conftest_ssh.lab_python_each_test
pytestmark = [pytest.mark.slow, pytest.mark.gui]
LEFT = Qt.MouseButton.LeftButton
FOREVER = 1_000_000


def choose(combo: QComboBox, data: str) -> None:
    index = combo.findData(data)
    assert index >= 0, f"{data} is not offered"
    combo.setCurrentIndex(index)


def screenshot(widget: QWidget, name: str) -> None:
    """With DTGUI_SCREENSHOT_DIR set (run under Xvfb), keep a picture to look at."""
    folder = os.environ.get("DTGUI_SCREENSHOT_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        widget.grab().save(str(Path(folder) / f"{name}.png"))


Shown = TypeVar("Shown", bound=QDialog)


def wait_dialog(qtbot: QtBot, shown: list[QDialog],
                kind: type[Shown] | tuple[type[Shown], ...]) -> Shown:
    def open_ones() -> list[Shown]:
        return [d for d in shown if shiboken6.isValid(d) and isinstance(d, kind) and d.isVisible()]

    qtbot.waitUntil(lambda: bool(open_ones()), timeout=60_000)
    return open_ones()[-1]


def test_two_machines_from_the_wizard_four_curves_stop_leaves_nothing(
        qtbot: QtBot, ssh_lab: sshhosts.SshLab, ssh_env: Path, lab_python: str,
        stub_python: Callable[..., str]) -> None:
    key_host, password_host = ssh_lab.hosts[0], ssh_lab.hosts[1]
    trust(key_host)  # the password host's key is unknown: the launch asks
    registry = MachineRegistry()
    registry.add(machine(ssh_lab, key_host, name="box-a"))
    registry.add(machine(ssh_lab, password_host, auth="password", name="box-b"))
    registry.save()

    window = ready_window(qtbot)
    shown: list[QDialog] = []
    window.machines.flow.dialogShown.connect(shown.append)

    wizard = open_wizard_on(qtbot, window, "multi_worker_mirrored")
    wizard.strategy_page.workers_spin.setValue(4)
    click_next(qtbot, wizard)
    wizard.options_page.steps_spin.setValue(100000)  # stopped by hand
    wizard.options_page.checkpoint_spin.setValue(0)
    click_next(qtbot, wizard)  # model: the demo
    click_next(qtbot, wizard)  # review
    box = wizard.review_page.machines_box
    assert box.isVisible()
    for task, where in {"worker:0": "box-a", "worker:1": "box-a",
                        "worker:2": "box-b", "worker:3": "box-b"}.items():
        choose(box._combos[task], where)
    for name in ("box-a", "box-b"):
        box._pythons[name].setText(stub_python(lab_python))
    wizard.review_page.replan()
    plan = wizard.plan()
    assert [t.machine for t in plan.tasks] == ["box-a", "box-a", "box-b", "box-b"]
    assert [a.split(":")[0] for a in plan.cluster["worker"]] == [
        key_host.address, key_host.address, password_host.address, password_host.address]
    qtbot.wait(100)  # widgets added to the shown page appear with the next events
    screenshot(wizard, "multihost-review")
    with qtbot.waitSignal(wizard.accepted, timeout=60_000):
        qtbot.mouseClick(wizard.button(QWizard.WizardButton.FinishButton), LEFT)

    # The launch asks for box-b's password (not remembered) and host key; nothing else.
    answered: list[str] = []
    for _ in range(2):
        dialog = wait_dialog(qtbot, shown, (HostKeyDialog, SecretPrompt))
        if isinstance(dialog, HostKeyDialog):
            assert dialog.error.host == password_host.address
            qtbot.mouseClick(dialog.trust_button, LEFT)
            answered.append("host key")
        else:
            assert isinstance(dialog, SecretPrompt)
            assert dialog.kind == "password" and not dialog.remember.isChecked()
            dialog.edit.setText(ssh_lab.password)
            qtbot.mouseClick(dialog.ok_button, LEFT)
            answered.append("password")
        def gone(d: QDialog = dialog) -> bool:
            return not shiboken6.isValid(d) or not d.isVisible()

        qtbot.waitUntil(gone)
    assert sorted(answered) == ["host key", "password"]

    qtbot.waitUntil(lambda: window.session.source is not None, timeout=120_000)
    controller = controller_of(window)
    dashboard = dashboard_of(window)
    assert window.pages.currentWidget() is dashboard
    qtbot.waitUntil(lambda: dashboard.loss_panel.replica_ids() == [0, 1, 2, 3], timeout=180_000)
    qtbot.waitUntil(lambda: min(curve_points(window, r) for r in range(4)) >= 3, timeout=60_000)
    assert controller.state == "running"
    if os.environ.get("DTGUI_SCREENSHOT_DIR"):
        qtbot.waitUntil(lambda: min(curve_points(window, r) for r in range(4)) >= 40,
                        timeout=120_000)
        screenshot(window, "multihost-dashboard")
    snapshot = controller.metrics.snapshot()
    assert {t.machine for t in snapshot.tasks.values()} == {"box-a", "box-b"}
    # Every machine's device use (CPU here, labelled as CPU) is plotted.
    assert sorted(snapshot.device_util) == ["box-a cpu0", "box-b cpu0"]

    stop_with_the_button(qtbot, window)


@pytest.fixture
def windows(qtbot: QtBot) -> Iterator[list[MainWindow]]:
    """Main windows made by a test; a run still active at the end is stopped (so closing the
    window at teardown asks nothing) and every watcher is stopped."""
    made: list[MainWindow] = []
    yield made
    for window in made:
        controller = window.session.source
        if isinstance(controller, RunController) and not controller.finished:
            controller.request_stop()
            controller.wait(60)
    for window in made:
        if window.session.source is not None and window.session.source.record is not None:
            stop_watcher(window.session.source.record)
        window.close()  # not through qtbot.addWidget: its close would ask about the run
    # Delete the windows here, once no background job can call back into them: left to the
    # garbage collector, they would be deleted at a random moment of a later test.
    QThreadPool.globalInstance().waitForDone(30_000)
    for window in made:
        window.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    made.clear()
    gc.collect()


def click_message_button(qtbot: QtBot, text: str) -> None:
    """Click `text` in the modal message box that is about to open (exec() blocks)."""
    def click() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(50, click)
            return
        button = next(b for b in box.buttons() if b.text() == text)
        button.click()

    QTimer.singleShot(50, click)


def test_close_keep_training_reopen_and_reattach_without_a_gap(
        qtbot: QtBot, ssh_lab: sshhosts.SshLab, ssh_env: Path, lab_python: str,
        windows: list[MainWindow], stub_python: Callable[..., str]) -> None:
    """Close dtgui mid-run (Keep training): a watcher keeps the run's failure policy, holding
    the password given at launch in memory only. Reopen: Reattach asks for the password again
    (it was not remembered), takes the run back from the watcher, and the curves have every
    step, including those trained while dtgui was closed. The tasks train with the stub child
    under the real supervisor (tests/stub_task.py): the policy, not TensorFlow."""
    host = ssh_lab.hosts[0]
    trust(host)
    registry = MachineRegistry()
    registry.add(machine(ssh_lab, host, auth="password", name="box-a"))
    registry.save()
    plan = Plan(run_name="closed-and-back", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                replicas_per_task=1, steps=FOREVER, steps_per_epoch=25, checkpoint_every=0)
    placed = place_on_machines(plan, {"worker:0": "box-a", "worker:1": "box-a"},
                               {"box-a": host.address}, {"box-a": [0, 0]},
                               logins={"box-a": {"python": stub_python(lab_python)}})

    first = ready_window(qtbot, windows)
    shown: list[QDialog] = []
    first.machines.flow.dialogShown.connect(shown.append)
    first.launch(placed)
    give_password(qtbot, shown, ssh_lab.password)
    qtbot.waitUntil(lambda: first.session.source is not None, timeout=120_000)
    record = controller_of(first).record
    assert record is not None
    qtbot.waitUntil(lambda: dashboard_of(first).loss_panel.replica_ids() == [0, 1],
                    timeout=180_000)
    qtbot.waitUntil(lambda: min(curve_points(first, r) for r in range(2)) >= 5, timeout=60_000)
    click_message_button(qtbot, "Keep training")
    first.close()
    assert not first.isVisible()
    qtbot.waitUntil(lambda: watcher_pid(record) is not None, timeout=60_000)
    watcher = watcher_pid(record)
    assert ssh_lab.password.encode() not in Path(f"/proc/{watcher}/cmdline").read_bytes()
    events = Path(record.machines[0].dir) / "output" / "events-worker-0.jsonl"
    closed_at = len(replica_losses(events))
    wait_for(lambda: len(replica_losses(events)) >= closed_at + 50, 60,
             "training did not go on with dtgui closed")
    assert RunRecord.load(Path(record.bundle)).state == "running"

    second = MainWindow()
    windows.append(second)
    second.show()
    qtbot.waitUntil(second.machines.ready, timeout=60_000)
    shown.clear()
    second.machines.flow.dialogShown.connect(shown.append)
    running = RunHistory().running()
    assert [r.run_id for r in running] == [record.run_id]
    second.show_runs()
    page = second.runs_page
    qtbot.waitUntil(lambda: page.row_count() == 1, timeout=60_000)
    assert page.cell_text(0, STATE) == "running · watched"
    second._reattach(running[0])
    give_password(qtbot, shown, ssh_lab.password)
    qtbot.waitUntil(lambda: second.session.source is not None, timeout=60_000)
    assert watcher_pid(record) is None  # the GUI took the run back
    controller = controller_of(second)
    qtbot.waitUntil(lambda: controller.metrics.snapshot().step >= 10, timeout=60_000)
    for rid in (0, 1):
        steps = [int(x) for x in controller.metrics.snapshot().replica_loss[rid][0]]
        assert steps == list(range(1, len(steps) + 1)), f"replica {rid} has a gap"
    with qtbot.waitSignal(second.session.ended, timeout=60_000):
        click_stop(qtbot, dashboard_of(second).header.stop_button)
    assert controller.record is not None
    pgids = list(controller.record.pids().values())
    qtbot.waitUntil(lambda: not live_members(pgids), timeout=60_000)
    second.close()


def give_password(qtbot: QtBot, shown: list[QDialog], password: str) -> None:
    prompt = wait_dialog(qtbot, shown, SecretPrompt)
    prompt.edit.setText(password)
    qtbot.mouseClick(prompt.ok_button, LEFT)
