"""The whole story through the real GUI: point dtgui at an existing model.fit training script,
pick two machines, launch, watch its curves (one a worker) and both machines' devices live,
with the note of the Keras the script gets there, Stop (nothing is left); and, side by side,
export it and run it by hand on both machines with plain scp/ssh.

Real sshd hosts in network namespaces (tests/sshhosts.py), real TensorFlow, real dialogs.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import conftest_ssh
import pytest
import sshhosts
from conftest_ssh import copy_and_start, machine, trust
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWizard
from pytestqt.qtbot import QtBot
from test_gui_e2e import click_next, open_wizard_on
from test_gui_multihost import choose, screenshot
from test_ui_script import pick_script
from widgets import controller_of, dashboard_of, ready_window, stop_with_the_button

from dtgui.core.events import read_all
from dtgui.core.machines.registry import MachineRegistry
from dtgui.ui.main_window import MainWindow
from dtgui.ui.plots.curves import CurveSet

ssh_lab, ssh_env, real_keyring = conftest_ssh.ssh_lab, conftest_ssh.ssh_env, conftest_ssh.real_keyring
lab_python = conftest_ssh.lab_python_each_test
pytestmark = [pytest.mark.slow, pytest.mark.gui]
LEFT = Qt.MouseButton.LeftButton
PROJECT = Path(__file__).resolve().parent / "script_projects" / "mwm_fit"
ROOT = Path(__file__).resolve().parent.parent


def points(curves: CurveSet[str], key: str) -> int:
    return len(curves.shown_data(key)[0]) if key in curves.raw else 0


def start_by_hand(lab: sshhosts.SshLab, hosts: dict[str, sshhosts.Host], project: Path,
                  python: str, tmp_path: Path) -> list[subprocess.Popen[str]]:
    """The script exported for box-a and box-b, copied to each with scp and started there with
    `bash run.sh MACHINE` over ssh, as a person would by hand."""
    out = tmp_path / "exported"
    port = random.randrange(30000, 60000)
    subprocess.run([sys.executable, "-m", "dtgui", "export", str(out), "--strategy",
                    "multi_worker_mirrored", "--workers-on", "box-a,box-b", "--base-port",
                    str(port), "--script", str(project / "main.py"), "--project", str(project),
                    "--script-arg=2", "--script-arg=3", "--legacy-keras", "--run-name", "byhand"],
                   check=True, cwd=ROOT, timeout=60, env={**os.environ})
    readme = (out / "README.md").read_text()
    assert "bash run.sh box-a" in readme and "## Your training script" in readme
    return [copy_and_start(lab, host, out, f"byhand-{name}", python, name)
            for name, host in hosts.items()]


def check_by_hand(lab: sshhosts.SshLab, procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        output, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0, output
    for name, stem in (("box-a", "worker-0"), ("box-b", "worker-1")):
        copy = lab.home / f"byhand-{name}"
        events = read_all(copy / "output" / f"events-{stem}.jsonl")
        epochs = [e.get("step") for e in events
                  if e.kind == "scalar" and e.get("tag") == "train/epoch_loss"]
        assert epochs == [0, 1], (name, epochs)
        assert any(e.kind == "finished" for e in events)
        shutil.rmtree(copy, ignore_errors=True)


def test_script_on_two_machines_from_the_gui_and_by_hand(
        qtbot: QtBot, ssh_lab: sshhosts.SshLab, ssh_env: Path, lab_python: str,
        tmp_path: Path) -> None:
    host_a, host_b = ssh_lab.hosts[0], ssh_lab.hosts[1]
    trust(host_a, host_b)
    registry = MachineRegistry()
    registry.add(machine(ssh_lab, host_a, name="box-a", python=lab_python))
    registry.add(machine(ssh_lab, host_b, name="box-b", python=lab_python))
    registry.save()
    project = tmp_path / "my_project"
    shutil.copytree(PROJECT, project)

    window = ready_window(qtbot)
    # The same script exported and run by hand on both machines, side by side with the run
    # from the GUI (its own ports and directories), checked at the end.
    by_hand = start_by_hand(ssh_lab, {"box-a": host_a, "box-b": host_b}, project, lab_python,
                            tmp_path)
    try:
        run_from_the_gui(qtbot, window, project, lab_python)
    except BaseException:
        for proc in by_hand:
            proc.kill()
        raise
    check_by_hand(ssh_lab, by_hand)


def run_from_the_gui(qtbot: QtBot, window: MainWindow, project: Path, python: str) -> None:
    """The wizard, the live dashboard and Stop."""
    wizard = open_wizard_on(qtbot, window, "multi_worker_mirrored")
    wizard.strategy_page.workers_spin.setValue(2)
    click_next(qtbot, wizard)
    wizard.options_page.checkpoint_spin.setValue(0)
    click_next(qtbot, wizard)
    box = pick_script(qtbot, wizard.model_page, project, "main.py")
    box.args_edit.setText("1000 4")  # stopped by hand
    box.legacy_check.setChecked(True)
    box.start_look()
    next_button = wizard.button(QWizard.WizardButton.NextButton)
    qtbot.waitUntil(next_button.isEnabled, timeout=60_000)
    screenshot(wizard, "script-multihost-model-page")
    click_next(qtbot, wizard)
    review = wizard.review_page.machines_box
    for task, where in {"worker:0": "box-a", "worker:1": "box-b"}.items():
        choose(review._combos[task], where)
    for name in ("box-a", "box-b"):
        review._pythons[name].setText(python)
    wizard.review_page.replan()
    assert [t.machine for t in wizard.plan().tasks] == ["box-a", "box-b"]
    with qtbot.waitSignal(wizard.accepted, timeout=60_000):
        qtbot.mouseClick(wizard.button(QWizard.WizardButton.FinishButton), LEFT)

    qtbot.waitUntil(lambda: window.session.source is not None, timeout=120_000)
    controller = controller_of(window)
    dashboard = dashboard_of(window)
    panel = dashboard.scalar_panel

    def curves_from_both() -> bool:
        sets = panel.curves.curves
        return (panel.tag == "train/epoch_loss" and set(sets) == {"worker:0", "worker:1"}
                and all(points(panel.curves, key) >= 3 for key in sets))

    try:
        qtbot.waitUntil(lambda: curves_from_both() or controller.finished, timeout=240_000)
        assert controller.state == "running", controller.message
        assert sorted(dashboard.loss_panel.replica_ids()) == [0, 1]
        snapshot = controller.metrics.snapshot()
        assert sorted(snapshot.device_util) == ["box-a cpu0", "box-b cpu0"]
        assert {t: s.machine for t, s in snapshot.tasks.items()} == {"worker:0": "box-a",
                                                                    "worker:1": "box-b"}
        notes = [line for line in controller.metrics.log_lines("worker:0") if "[dtgui]" in line]
        assert any("box-a: the script gets tf_keras 2.21" in n for n in notes), notes
        if os.environ.get("DTGUI_SCREENSHOT_DIR"):
            qtbot.wait(1500)  # the picture shows a few more points
        screenshot(window, "script-multihost-dashboard")
    except BaseException:
        print("tasks:", controller.metrics.snapshot().tasks, controller.message,
              panel.tag, list(panel.curves.curves))
        controller.request_stop()
        controller.wait(60)
        raise
    stop_with_the_button(qtbot, window)

