"""A Slurm cluster through the real GUI, on a real Slurm 22.05 (tests/slurm_cluster.py: two
nodes on this machine, which is the login node).

The wizard sends a MultiWorkerMirrored run to the cluster as one job on 2 nodes; while the job
waits behind others the dashboard says why; once it runs, both replicas' curves come live;
Stop cancels it and nothing is left in the queue or on the nodes. Then dtgui is closed
mid-run (Keep training), reopened, and the run reattached from its job id: the curves have
every step. The tasks train with the stub child under the real supervisor (tests/stub_task.py);
TensorFlow on Slurm is tested in tests/test_slurm_run.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import conftest_ssh
import pytest
import remote_python
import runs
import sshhosts
from conftest_ssh import machine, trust
from fakes import wait_for
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWizard
from pytestqt.qtbot import QtBot
from runs import replica_losses
from slurm_cluster import SlurmCluster, served_cluster
from test_gui_e2e import click_next, curve_points, open_wizard_on
from test_gui_multihost import click_message_button, screenshot, windows
from test_slurm_run import login_node, processes_in
from widgets import click_stop, controller_of, dashboard_of, ready_window, slurm_box, slurm_radio

from dtgui.core.machines.registry import MachineRegistry
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.records import RunHistory, RunRecord
from dtgui.kinds.slurm.batch_bundle import place_on_cluster
from dtgui.kinds.slurm.job import LOCAL_CLUSTER, SlurmDefaults, SlurmJob
from dtgui.launch.start.watcher import watcher_pid
from dtgui.ui.app import make_app
from dtgui.ui.main_window import MainWindow

__all__ = ["login_node", "windows"]  # fixtures
ssh_lab, ssh_env, real_keyring = conftest_ssh.ssh_lab, conftest_ssh.ssh_env, conftest_ssh.real_keyring
pytestmark = [pytest.mark.slow, pytest.mark.gui]
LEFT = Qt.MouseButton.LeftButton
FOREVER = 1_000_000


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    yield from served_cluster()


def fill_the_cluster(slurm: SlurmCluster, where: Path) -> tuple[str, ...]:
    """Jobs that take every core of both nodes (as often as the partition shares a core)."""
    return tuple(slurm.run("sbatch", "--parsable", "-N2", "--ntasks-per-node=2",
                           f"--chdir={where}", "--wrap", "sleep 120").stdout.strip()
                 for _ in range(4))


def test_wizard_to_a_slurm_job_pending_live_curves_and_stop(
        qtbot: QtBot, slurm: SlurmCluster, windows: list[MainWindow], tmp_path: Path,
        stub_python: Callable[..., str]) -> None:
    make_app([])
    window = MainWindow()
    windows.append(window)
    window.show()
    wizard = open_wizard_on(qtbot, window, "multi_worker_mirrored")
    click_next(qtbot, wizard)
    wizard.options_page.steps_spin.setValue(FOREVER)  # stopped by hand
    wizard.options_page.checkpoint_spin.setValue(0)
    click_next(qtbot, wizard)
    click_next(qtbot, wizard)  # the review
    review = wizard.review_page
    box = review.machines_box
    # Slurm's client is here: this machine is offered as the cluster's login node
    job_box = slurm_box(box)
    qtbot.waitUntil(lambda: job_box.cluster_combo.findData(LOCAL_CLUSTER) >= 0, timeout=60_000)
    qtbot.mouseClick(slurm_radio(box), LEFT)
    job_box.cluster_combo.setCurrentIndex(job_box.cluster_combo.findData(LOCAL_CLUSTER))
    assert job_box.isVisible() and not box.inner.isVisible()
    job_box.nodes_spin.setValue(3)  # the test cluster has 2 nodes: sinfo says so here
    qtbot.waitUntil(lambda: "partition debug has 2" in review.warnings.text(), timeout=60_000)
    assert not wizard.button(QWizard.WizardButton.FinishButton).isEnabled()
    job_box.nodes_spin.setValue(2)
    job_box.python_edit.setText(stub_python(step_seconds=0.05))
    assert review.isComplete(), review.warnings.text()
    script = review.batch_view.toPlainText()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks-per-node=1" in script
    assert review.tabs.currentWidget() is review.batch_view
    qtbot.wait(100)
    screenshot(wizard, "slurm-review")

    blockers = fill_the_cluster(slurm, tmp_path)
    try:
        with qtbot.waitSignal(wizard.accepted, timeout=60_000):
            qtbot.mouseClick(wizard.button(QWizard.WizardButton.FinishButton), LEFT)
        qtbot.waitUntil(lambda: window.session.source is not None, timeout=60_000)
        controller = controller_of(window)
        header = dashboard_of(window).header
        # queued behind the blockers: the dashboard says why, and the run is not hung
        # Slurm says "None" until its scheduler has looked at the job, then why it waits
        qtbot.waitUntil(lambda: header.message_label.isVisible()
                        and "is waiting in the queue (" in header.message_label.text(),
                        timeout=60_000)  # Resources, Priority
        assert controller.state == "running"
        screenshot(window, "slurm-pending")
    finally:
        slurm.run("scancel", *blockers)
    job = controller.executors[0].job_id
    assert RunRecord.load(controller.bundle.path).machines[0].job_id == job
    qtbot.waitUntil(lambda: dashboard_of(window).loss_panel.replica_ids() == [0, 1],
                    timeout=60_000)
    qtbot.waitUntil(lambda: min(curve_points(window, r) for r in range(2)) >= 5, timeout=60_000)
    assert not header.message_label.isVisible()  # the queue's reason went with the wait
    assert sorted(controller.metrics.snapshot().replica_loss) == [0, 1]

    with qtbot.waitSignal(window.session.ended, timeout=60_000) as ended:
        click_stop(qtbot, header.stop_button)
    assert ended.args[0] == "stopped"
    tasks = controller.metrics.snapshot().tasks.values()
    assert {t.status for t in tasks} == {"stopped"}  # cancelled by dtgui: no task failed
    wait_for(lambda: job not in slurm.queue(), 60, f"job {job} is still queued")
    wait_for(lambda: not processes_in(controller.bundle.path), 60, "a task process is left")
    assert slurm.drained() == []


def test_close_keep_training_reopen_and_reattach_from_the_job_id(
        qtbot: QtBot, slurm: SlurmCluster, windows: list[MainWindow],
        stub_python: Callable[..., str]) -> None:
    """Close dtgui mid-run (Keep training): the job stays in the queue, a watcher follows it.
    Reopen and reattach: the run is found again from the job id in its record, and the curves
    have every step, those trained while dtgui was closed too."""
    job = SlurmJob(nodes=2, tasks_per_node=1, python=stub_python(step_seconds=0.05))
    plan = place_on_cluster(Plan(run_name="slurm-closed-and-back",
                                 strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                                 replicas_per_task=1, steps=FOREVER, steps_per_epoch=50,
                                 checkpoint_every=0), job)
    make_app([])
    first = MainWindow()
    windows.append(first)
    first.show()
    first.launch(plan, job=job)
    qtbot.waitUntil(lambda: first.session.source is not None, timeout=60_000)
    record = controller_of(first).record
    assert record is not None
    qtbot.waitUntil(lambda: min(curve_points(first, r) for r in range(2)) >= 5, timeout=60_000)
    job_id = controller_of(first).executors[0].job_id
    click_message_button(qtbot, "Keep training")
    first.close()
    assert not first.isVisible()
    qtbot.waitUntil(lambda: watcher_pid(record) is not None, timeout=60_000)
    events = Path(record.bundle) / "output" / "events-worker-0.jsonl"
    closed_at = len(replica_losses(events))
    wait_for(lambda: len(replica_losses(events)) >= closed_at + 20, 60,
             "training did not go on with dtgui closed")
    assert job_id in slurm.queue()

    second = MainWindow()
    windows.append(second)
    second.show()
    running = RunHistory().running()
    assert [r.run_id for r in running] == [record.run_id]
    second._reattach(running[0])
    qtbot.waitUntil(lambda: second.session.source is not None, timeout=60_000)
    assert watcher_pid(record) is None  # the GUI took the run back
    controller = controller_of(second)
    assert controller.executors[0].job_id == job_id
    qtbot.waitUntil(lambda: controller.metrics.snapshot().step >= closed_at + 30,
                    timeout=60_000)
    for rid in (0, 1):
        steps = [int(x) for x in controller.metrics.snapshot().replica_loss[rid][0]]
        assert steps == list(range(1, len(steps) + 1)), f"replica {rid} has a gap"
    qtbot.waitUntil(lambda: min(curve_points(second, r) for r in range(2)) >= closed_at + 30,
                    timeout=60_000)
    with qtbot.waitSignal(second.session.ended, timeout=60_000) as ended:
        click_stop(qtbot, dashboard_of(second).header.stop_button)
    assert ended.args[0] == "stopped"
    assert {t.status for t in controller.metrics.snapshot().tasks.values()} == {"stopped"}
    wait_for(lambda: job_id not in slurm.queue(), 60, f"job {job_id} is still queued")
    wait_for(lambda: not processes_in(Path(record.bundle)), 60, "a task process is left")
    assert slurm.drained() == []
    if os.environ.get("DTGUI_SCREENSHOT_DIR"):
        screenshot(second, "slurm-reattached")


def test_a_registered_cluster_from_the_wizard_over_ssh(
        qtbot: QtBot, slurm: SlurmCluster, ssh_env: Path, login_node: sshhosts.Host,
        ssh_lab: sshhosts.SshLab, windows: list[MainWindow]) -> None:
    """A cluster registered by its login node (an SSH test host): chosen in the wizard with its
    defaults, the run goes there through the launch's connection, its curves come back live,
    and Stop cancels the job on the login node."""
    trust(login_node)
    python = runs.stub_python(python=remote_python.python_for(), step_seconds=0.05)
    registry = MachineRegistry()
    registry.add(machine(ssh_lab, login_node, name="hpc", python=python,
                         kind="slurm",
                         settings=SlurmDefaults(partition="debug", shared_dir="gui-runs")))
    registry.save()
    window = ready_window(qtbot, windows)
    wizard = open_wizard_on(qtbot, window, "multi_worker_mirrored")
    click_next(qtbot, wizard)
    wizard.options_page.steps_spin.setValue(FOREVER)
    wizard.options_page.checkpoint_spin.setValue(0)
    click_next(qtbot, wizard)
    click_next(qtbot, wizard)
    box = wizard.review_page.machines_box
    qtbot.mouseClick(slurm_radio(box), LEFT)
    job_box = slurm_box(box)
    assert job_box.cluster_combo.currentData() == "hpc"  # the registered cluster comes first
    assert (job_box.partition_edit.text(), job_box.python_edit.text()) == ("debug", python)
    assert "#SBATCH --partition=debug" in wizard.review_page.batch_view.toPlainText()
    with qtbot.waitSignal(wizard.accepted, timeout=60_000):
        qtbot.mouseClick(wizard.button(QWizard.WizardButton.FinishButton), LEFT)
    qtbot.waitUntil(lambda: window.session.source is not None, timeout=60_000)
    controller = controller_of(window)
    assert controller.record is not None
    assert controller.record.machines[0].dir.startswith(str(ssh_lab.home / "gui-runs"))
    qtbot.waitUntil(lambda: min(curve_points(window, r) for r in range(2)) >= 5, timeout=60_000)
    # the job runs: the queue's note (its first poll may find it pending) is gone from the header
    header = dashboard_of(window).header
    qtbot.waitUntil(lambda: not header.message_label.isVisible(), timeout=60_000)
    job = controller.executors[0].job_id
    # the Machines panel's probe of the cluster: its partitions, and this job among yours
    panel = window.machines
    panel.refresh(["hpc"])
    qtbot.waitUntil(lambda: panel.states["hpc"].status in ("ok", "error"), timeout=60_000)
    panel.table.selectRow(panel.row_of("hpc"))
    card = panel.details_label.text()
    assert "Slurm 22." in card and "debug (default): 2 nodes" in card and "short: 2" in card
    assert f"{job} " in card and "RUNNING on 2 nodes in debug" in card, card
    screenshot(window, "slurm-machines")
    with qtbot.waitSignal(window.session.ended, timeout=60_000) as ended:
        click_stop(qtbot, dashboard_of(window).header.stop_button)
    assert ended.args[0] == "stopped"
    wait_for(lambda: job not in slurm.queue(), 60, f"job {job} is still queued")
    wait_for(lambda: not processes_in(Path(controller.executors[0].directory)), 60,
             "a task process is left")
