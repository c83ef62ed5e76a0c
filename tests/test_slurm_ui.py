"""The machine dialog's Slurm part: a cluster's login node with its jobs' defaults, kept on
edit, refused with the dialog's other problems when a value could reach a shell."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot
from test_gui_multihost import windows
from widgets import slurm_box, slurm_job, slurm_radio

from dtgui.core.machines.registry import Machine, MachineRegistry
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.kinds.slurm.fields import SlurmFields
from dtgui.kinds.slurm.job import SlurmDefaults
from dtgui.ui.machines.add_dialog import MachineDialog
from dtgui.ui.main_window import MainWindow
from dtgui.ui.wizard import RunWizard

__all__ = ["windows"]  # a fixture

CLUSTER = Machine("hpc", "login.example.org", user="me", auth="agent", kind="slurm",
                  settings=SlurmDefaults(partition="gpu", account="lab", time_limit="04:00:00",
                                      gpus_per_node=4, modules=("cuda/12.2", "cudnn"),
                                      venv="~/envs/tf"))


def test_the_dialog_keeps_and_edits_a_clusters_defaults(qtbot: QtBot, tmp_path: Path) -> None:
    registry = MachineRegistry(tmp_path / "machines.toml")
    dialog = MachineDialog(registry, CLUSTER)
    qtbot.addWidget(dialog)
    dialog.show()
    fields = dialog.kind_fields["slurm"]
    assert isinstance(fields, SlurmFields)  # the Slurm kind's, registered by its plugin
    assert fields.isChecked() and dialog.machine() == CLUSTER  # nothing lost on edit
    assert fields.body.isVisible()
    fields.partition_edit.setText("gpu;reboot")
    assert not dialog.ok_button.isEnabled() and "partition" in dialog.problems_label.text()
    fields.partition_edit.setText("a100")
    fields.gpus_spin.setValue(8)
    assert dialog.ok_button.isEnabled()
    assert dialog.machine().settings == SlurmDefaults(
        partition="a100", account="lab", time_limit="04:00:00", gpus_per_node=8,
        modules=("cuda/12.2", "cudnn"), venv="~/envs/tf")
    fields.setChecked(False)
    assert dialog.machine().settings is None and dialog.ok_button.isEnabled()
    assert dialog.machine().kind == "ssh"
    assert not fields.body.isVisible()  # a machine that is no cluster: a short dialog

    plain = MachineDialog(registry, None)
    qtbot.addWidget(plain)
    assert not plain.kind_fields["slurm"].isChecked() and plain.machine().settings is None


def review_on(qtbot: QtBot, machines: list[Machine], last: Plan | None = None) -> RunWizard:
    """A wizard on its review page with `machines` registered (`last`: the last run's plan)."""
    wizard = RunWizard(None, last or Plan(run_name="on-hpc",
                                          strategy=Strategy.MULTI_WORKER_MIRRORED,
                                          workers=2, checkpoint_every=0))
    qtbot.addWidget(wizard)
    wizard.set_machines(machines)
    wizard.show()
    for _ in range(3):
        wizard.next()
    assert wizard.currentId() == 3
    return wizard


def choose_strategy_again(wizard: RunWizard, strategy: str) -> None:
    """From the review back to the first page, `strategy` chosen there, forward to the review."""
    for _ in range(3):
        wizard.back()
    wizard.strategy_page.select_strategy(strategy)
    for _ in range(3):
        wizard.next()


def test_the_wizard_sends_a_run_to_a_cluster_and_shows_its_batch_script(qtbot: QtBot) -> None:
    """The review's Slurm target: the cluster's defaults, nodes x tasks per node x GPUs per
    task, the batch script the bundle will hold, and a clear error for each bad value."""
    from PySide6.QtWidgets import QWizard

    from dtgui.kinds.slurm.job import batch_script
    from dtgui.ui.wizard.strategy_list import ROLE_TAGLINE

    box_machine = Machine("box", "box.example.org", user="me", auth="agent")
    wizard = review_on(qtbot, [box_machine, CLUSTER])
    review = wizard.review_page
    box = review.machines_box
    assert box.ssh_radio.isChecked()  # a machine over SSH is registered: its rows, as before
    assert slurm_box(box).cluster_combo.itemData(0) == "hpc"
    assert "hpc" not in [box._combos["worker:0"].itemData(i)  # a cluster takes no single task
                         for i in range(box._combos["worker:0"].count())]
    slurm_radio(box).setChecked(True)
    slurm = slurm_box(box)
    assert slurm.isVisible() and not box.inner.isVisible()
    assert (slurm.partition_edit.text(), slurm.time_edit.text()) == ("gpu", "04:00:00")
    assert slurm.gpus_spin.value() == 4 and slurm.python_edit.text() == "python3"
    assert slurm.nodes_spin.value() == 2 and slurm.tasks_spin.value() == 1

    # 2 nodes x 2 tasks x 1 GPU: four workers, one GPU replica each, 2 GPUs a node
    slurm.tasks_spin.setValue(2)
    slurm.gpus_spin.setValue(1)
    plan, job = wizard.plan(), slurm_job(review)
    assert job is not None and (job.nodes, job.tasks_per_node, job.gpus_per_node) == (2, 2, 2)
    assert [t.task_id for t in plan.tasks] == [f"worker:{i}" for i in range(4)]
    assert plan.device_kind == "gpu" and plan.replicas_per_task == 1
    assert {t.machine for t in plan.tasks} == {"hpc"}
    assert review.tabs.isTabVisible(2) and review.tabs.currentIndex() == 2
    text = review.batch_view.toPlainText()
    assert text == batch_script(plan, job)  # exactly what the bundle holds
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2", "#SBATCH --gpus-per-node=2",
                 "#SBATCH --partition=gpu", "#SBATCH --account=lab", "#SBATCH --time=04:00:00",
                 "module load cuda/12.2", "srun --kill-on-bad-exit=1"):
        assert line in text, line
    item = review.task_list.item(3)
    assert "Slurm rank 3 · node 2" in item.data(ROLE_TAGLINE)
    review.task_list.setCurrentRow(3)
    assert "<node 2>:<port base + 3>" in review.tf_config_view.toPlainText()
    assert review.isComplete() and not review.warnings.isVisible()
    launch = wizard.button(QWizard.WizardButton.FinishButton)
    assert launch.isEnabled()
    again = review_on(qtbot, [box_machine, CLUSTER], last=plan)  # the last run's target
    assert slurm_radio(again.review_page.machines_box).isChecked()
    assert slurm_job(again.review_page) is not None and again.plan().tasks[0].machine == "hpc"

    # bad values: a clear message each, nothing to launch or export, no script
    slurm.time_edit.setText("two hours")
    assert not review.isComplete() and not launch.isEnabled()
    assert "time limit 'two hours' is not a Slurm time" in review.warnings.text()
    assert review.batch_view.toPlainText().startswith("# Not written")
    slurm.time_edit.setText("02:00:00")
    slurm.partition_edit.setText("gpu;reboot")
    assert "partition 'gpu;reboot' may hold only" in review.warnings.text()
    slurm.partition_edit.setText("")  # the cluster's default partition
    assert review.isComplete() and "--partition" not in review.batch_view.toPlainText()

    # ParameterServer by rank: the coordinator, the workers, the servers
    choose_strategy_again(wizard, "parameter_server")
    slurm.nodes_spin.setValue(2)
    slurm.tasks_spin.setValue(2)
    assert [t.task_id for t in wizard.plan().tasks] == ["chief:0", "worker:0", "worker:1",
                                                         "ps:0"]
    slurm.tasks_spin.setValue(1)
    assert "needs at least 3 tasks" in review.warnings.text() and not review.isComplete()

    # a single-process strategy: one task on one node
    choose_strategy_again(wizard, "mirrored")
    assert not slurm.nodes_spin.isEnabled() and slurm.nodes_spin.value() == 1
    job = slurm_job(review)
    assert job is not None and job.tasks == 1 and review.isComplete()

    box.local_radio.setChecked(True)  # back to this machine: no job, no batch script
    assert slurm_job(review) is None and not review.tabs.isTabVisible(2)
    assert all(t.is_local for t in wizard.plan().tasks)


def test_export_from_the_wizard_writes_the_slurm_bundle(
        qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        windows: list[MainWindow]) -> None:
    """Export bundle… with a Slurm target writes the job's bundle (job.sbatch as the review
    showed it) and says how to submit it by hand; the TPU strategy is refused for a cluster."""
    from PySide6.QtWidgets import QMessageBox

    from dtgui.kinds.slurm.job import SlurmJob

    wizard = review_on(qtbot, [CLUSTER])
    review = wizard.review_page
    slurm_radio(review.machines_box).setChecked(True)
    plan, job = wizard.plan(), slurm_job(review)
    assert isinstance(job, SlurmJob)
    shown = review.batch_view.toPlainText()
    said: list[str] = []
    monkeypatch.setattr(QMessageBox, "information", lambda _p, _t, text: said.append(text))
    window = MainWindow()
    windows.append(window)
    window.export(plan, tmp_path / "out", job)
    qtbot.waitUntil(lambda: bool(said), timeout=60_000)
    assert (tmp_path / "out" / "job.sbatch").read_text() == shown
    assert "sbatch job.sbatch" in said[0] and "bash run.sh" not in said[0]

    wizard.back()
    wizard.back()
    wizard.back()
    wizard.strategy_page.select_strategy("tpu")
    wizard.strategy_page.tpu_edit.setText("local")
    for _ in range(3):
        wizard.next()
    assert "The TPU strategy trains on a Cloud TPU" in review.warnings.text()
    assert not review.isComplete()


def test_a_probed_cluster_in_the_panel_and_the_wizard(qtbot: QtBot) -> None:
    """What the Machines panel's probe found of a cluster (sinfo, squeue): its card shows the
    partitions and the user's jobs and each problem with what to do; the wizard checks a job
    against those partitions, says where Launch sends the run, and the next wizard opens with
    the last job's fields."""
    from PySide6.QtWidgets import QWizard

    from dtgui.core.machines.registry import RemoteFacts
    from dtgui.kinds.slurm.answers import (
        ClusterFacts,
        parse_sinfo,
        parse_squeue,
        slurm_command_problem,
    )
    from dtgui.kinds.slurm.box import last_job_file
    from dtgui.ui.machines.texts import details_html, short_gpus, short_tf

    sinfo = ("gpu*|up|3|mixed|64|512000|gpu:a100:4(S:0-1)|2-00:00:00\n"
             "gpu*|up|1|drained*|64|512000|gpu:a100:4(S:0-1)|2-00:00:00\n"
             "debug|up|2|idle|2|4000|(null)|infinite\n")
    cluster = ClusterFacts("22.05.8", parse_sinfo(sinfo), parse_squeue(
        "2|gpu|train|PENDING|Resources|2026-11-24T18:00:00|0:00|4:00:00|2\n"))
    facts = RemoteFacts(python_command="python3", kind_facts=cluster)
    card = details_html(CLUSTER, facts)
    assert "Slurm 22.05.8" in card and "gpu (default): 4 nodes (3 mixed, 1 drained)" in card
    assert "64 CPUs, 500.0 GiB, 4 GPUs per node · 2-00:00:00 time limit" in card
    assert "2 train PENDING (Resources) on 2 nodes in gpu" in card
    assert (short_gpus(facts), short_tf(facts)) == ("4 nodes × 4 GPUs", "on nodes")
    down = slurm_command_problem("sinfo failed: slurm_load_partitions: Unable to contact slurm "
                                 "controller (connect failure)")
    assert "slurmctld" in details_html(CLUSTER, RemoteFacts(kind_facts=ClusterFacts(
        "22.05.8", problems=[down])))

    wizard = review_on(qtbot, [CLUSTER])
    wizard.set_target_facts({"hpc": cluster})
    box, review = wizard.review_page.machines_box, wizard.review_page
    slurm_radio(box).setChecked(True)
    launch = wizard.button(QWizard.WizardButton.FinishButton)
    assert "queue of the Slurm cluster hpc" in launch.toolTip()
    slurm_box(box).nodes_spin.setValue(5)
    assert any("has 4: ask for at most 4" in p for p in review.job_problems)
    assert not launch.isEnabled()
    slurm_box(box).nodes_spin.setValue(3)
    slurm_box(box).tasks_spin.setValue(2)
    slurm_box(box).gpus_spin.setValue(2)
    slurm_box(box).time_edit.setText("01:00:00")
    assert review.job_problems == [] and launch.isEnabled()
    plan = wizard.plan()
    wizard.accept()
    qtbot.waitUntil(last_job_file().exists, timeout=60_000)
    again = review_on(qtbot, [CLUSTER], last=plan)
    slurm = slurm_box(again.review_page.machines_box)
    qtbot.waitUntil(lambda: slurm.last_job is not None, timeout=60_000)
    assert slurm_radio(again.review_page.machines_box).isChecked()
    assert (slurm.nodes_spin.value(), slurm.tasks_spin.value(), slurm.gpus_spin.value(),
            slurm.partition_edit.text(), slurm.time_edit.text()) == (3, 2, 2, "gpu", "01:00:00")
    local = review_on(qtbot, [])
    assert local.button(QWizard.WizardButton.FinishButton).toolTip().startswith(
        "Start every process on this machine")
