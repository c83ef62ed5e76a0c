"""A machine's Python interpreter (registry, add/edit dialog, the wizard's default) and the
review page's per-machine GPU picker, with real widgets.

This machine has no GPU: every GPU below is a FAKE `GpuInfo` (FAKE_GPUS, FAKE_LOCAL_GPUS),
given to the wizard the way the main window gives it the Machines panel's probe results.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from keyrings.alt.file import PlaintextKeyring
from PySide6.QtWidgets import QCheckBox, QWizard
from pytestqt.qtbot import QtBot

from dtgui.core.bundles.bundle import task_environment, task_script_text
from dtgui.core.machines.hardware import GpuInfo, MachineFacts, TfView
from dtgui.core.machines.registry import Machine, MachineError, MachineRegistry, RemoteFacts
from dtgui.core.plans.placement import PlacementError
from dtgui.core.plans.plan import LOCAL_MACHINE, DeviceKind, MachineAccess, Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.remote import secrets
from dtgui.ui.machines.add_dialog import MachineDialog
from dtgui.ui.machines.panel import MachinesPanel
from dtgui.ui.machines.panel_actions import RowState
from dtgui.ui.wizard import RunWizard
from dtgui.ui.wizard.machines_box import MachinesBox
from dtgui.ui.wizard.wizard import PAGE_REVIEW

pytestmark = pytest.mark.gui

# FAKE GPUs: no test here touches a real GPU (this machine has none).
FAKE_GPUS = [GpuInfo(0, "FAKE Tesla T4", 15 << 30, 0, 0.0, "550.54"),
             GpuInfo(1, "FAKE Tesla T4", 15 << 30, 0, 0.0, "550.54"),
             GpuInfo(2, "FAKE A100-SXM4-40GB", 40 << 30, 0, 0.0, "550.54")]
FAKE_LOCAL_GPUS = [GpuInfo(0, "FAKE RTX A4000", 16 << 30, 0, 0.0, "550", "8.6"),
                   GpuInfo(1, "FAKE RTX A4000", 16 << 30, 0, 0.0, "550", "8.6")]
FAKE_LOCAL_FACTS = MachineFacts(
    hostname="fake-gpu-here", os_name="Linux", python="3.11", cpu_model="cpu", cpu_cores=8,
    ram_total=32 << 30, gpus=FAKE_LOCAL_GPUS,
    tf=TfView(version="2.21.0", gpus=("GPU:0", "GPU:1"), built_with_cuda=True))
GPU_BOX = Machine("gpu box", "10.1.0.2", user="me", auth="agent", python="/opt/tf/bin/python3")
H3 = Machine("h3", "10.1.0.3", 2222, user="me", auth="agent")
MACHINES = [GPU_BOX, H3]
MWM_GPU = Plan(run_name="gpus", strategy=Strategy.MULTI_WORKER_MIRRORED, device_kind=DeviceKind.GPU,
               workers=2, replicas_per_task=2)


# -- Machine.python in the registry --------------------------------------------------------------
def test_registry_keeps_the_python_and_reads_files_without_it(tmp_path: Path) -> None:
    path = tmp_path / "machines.toml"
    registry = MachineRegistry(path)
    hostile = "/opt/my envs/tf $(touch pwned)/bin/python3"  # data: quoted wherever used
    registry.add(Machine("a", "10.0.0.1", user="me", python=hostile))
    registry.add(Machine("b", "10.0.0.2", user="me"))
    assert "python = " in path.read_text()
    again = MachineRegistry(path)
    assert again.message == ""
    assert again.get("a").python == hostile and again.get("b").python == ""
    assert again.get("a") == registry.get("a")

    old = tmp_path / "old.toml"  # written by a dtgui without the field
    old.write_text('schema = 1\n\n[[machines]]\nname = "old"\nhost = "10.0.0.9"\n'
                   'port = 22\nuser = "me"\nauth = "agent"\nkey_file = ""\njump_host = ""\n')
    loaded = MachineRegistry(old)
    assert loaded.message == "" and loaded.get("old").python == ""
    loaded.save()
    assert MachineRegistry(old).get("old").python == ""

    for bad in ("python3\n-c evil", "py\rthon", "py\x00thon", "x" * 5000):
        assert any("Python interpreter" in p for p in Machine("c", "h", user="u",
                                                               python=bad).problems())
        with pytest.raises(MachineError, match="Python interpreter"):
            registry.add(Machine("c", "10.0.0.3", user="me", python=bad))
    bad_file = tmp_path / "bad.toml"
    bad_file.write_text('schema = 1\n[[machines]]\nname = "n"\nhost = "h"\nuser = "u"\n'
                        'python = "a\\nb"\n')
    skipped = MachineRegistry(bad_file)
    assert len(skipped) == 0 and "Python interpreter" in skipped.message


# -- the add/edit dialog -------------------------------------------------------------------------
def test_the_dialog_edits_the_python(qtbot: QtBot, tmp_path: Path) -> None:
    registry = MachineRegistry(tmp_path / "machines.toml")
    dialog = MachineDialog(registry, GPU_BOX)
    qtbot.addWidget(dialog)
    dialog.show()
    edit = dialog.python_edit
    assert edit.text() == "/opt/tf/bin/python3" and dialog.machine() == GPU_BOX
    assert "TensorFlow" in edit.toolTip() and "python3" in edit.toolTip()
    assert "python3" in edit.placeholderText()
    edit.selectAll()
    qtbot.keyClicks(edit, "  /srv/venv/bin/python  ")
    assert dialog.machine().python == "/srv/venv/bin/python" and dialog.ok_button.isEnabled()
    edit.setText("~/venv/bin/python")
    assert not dialog.ok_button.isEnabled()
    assert "full path" in dialog.problems_label.text()
    edit.clear()
    assert dialog.machine().python == "" and dialog.ok_button.isEnabled()

    add = MachineDialog(registry, None)
    qtbot.addWidget(add)
    assert add.python_edit.text() == ""


# -- the Python line of the wizard ---------------------------------------------------------------
def test_the_machines_python_is_the_default_unless_the_last_plan_chose_another(
        qtbot: QtBot) -> None:
    plan = Plan(run_name="py", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                replicas_per_task=1)

    def box_for(remembered: Plan | None) -> MachinesBox:
        box = MachinesBox()
        qtbot.addWidget(box)
        box.remember(remembered)
        box.set_machines(MACHINES)
        box.set_plan(plan)
        box._combos["worker:0"].setCurrentIndex(box._combos["worker:0"].findData("gpu box"))
        box._combos["worker:1"].setCurrentIndex(box._combos["worker:1"].findData("h3"))
        return box

    box = box_for(None)
    assert box._pythons["gpu box"].text() == "/opt/tf/bin/python3"
    assert box._pythons["h3"].text() == "python3"
    assert box.preview(plan).machine("gpu box").python == "/opt/tf/bin/python3"
    box._pythons["gpu box"].clear()  # empty: the machine's interpreter
    assert box.pythons()["gpu box"] == "/opt/tf/bin/python3"

    last = plan.with_changes(machines={"gpu box": MachineAccess(python="python3"),
                                       "h3": MachineAccess(python="/custom/python")})
    box = box_for(last)  # "python3" was only the default: the machine's own wins
    assert box._pythons["gpu box"].text() == "/opt/tf/bin/python3"
    assert box._pythons["h3"].text() == "/custom/python"
    last = plan.with_changes(machines={"gpu box": MachineAccess(python="/other/python")})
    box = box_for(last)
    assert box._pythons["gpu box"].text() == "/other/python"

    box = box_for(None)  # typed in this wizard: kept when the placement changes
    box._pythons["h3"].setText("python3.11")
    box._combos["worker:0"].setCurrentIndex(0)
    assert box._pythons["h3"].text() == "python3.11"


# -- the GPU picker ------------------------------------------------------------------------------
def gpu_box_for(qtbot: QtBot, plan: Plan, where: tuple[str, ...]) -> MachinesBox:
    box = MachinesBox()
    qtbot.addWidget(box)
    box.set_machines(MACHINES)
    box.set_gpu_facts({"gpu box": FAKE_GPUS})  # this machine: no GPU known
    box.set_plan(plan)
    box.show()
    for tid, name in zip(box._combos, where, strict=True):
        box._combos[tid].setCurrentIndex(box._combos[tid].findData(name))
    return box


def checkboxes(box: MachinesBox, machine: str) -> list[QCheckBox]:
    return sorted((b for b in box.findChildren(QCheckBox)
                   if b.objectName().startswith(f"gpu:{machine}:")), key=lambda b: b.objectName())


def test_gpu_picker_places_the_checked_gpus(qtbot: QtBot) -> None:
    box = gpu_box_for(qtbot, MWM_GPU, ("gpu box", LOCAL_MACHINE))
    assert box.gpus.isVisible()
    boxes = checkboxes(box, "gpu box")
    assert [b.text() for b in boxes] == ["0: FAKE Tesla T4 (15.0 GiB)",
                                         "1: FAKE Tesla T4 (15.0 GiB)",
                                         "2: FAKE A100-SXM4-40GB (40.0 GiB)"]
    qtbot.waitUntil(lambda: all(b.isVisible() for b in boxes))  # shown by the event loop
    assert all(b.isChecked() for b in boxes)  # all checked at first
    assert box.gpus.note(LOCAL_MACHINE).startswith("no GPU known on this machine")
    placed = box.preview(MWM_GPU)
    assert [(t.machine_name, t.gpus) for t in placed.tasks] == [("gpu box", (0, 1)),
                                                               (LOCAL_MACHINE, ())]

    boxes[0].setChecked(False)  # as a click would
    placed = box.preview(MWM_GPU)
    worker0 = placed.tasks[0]
    assert worker0.gpus == (1, 2)
    assert task_environment(placed, worker0)["CUDA_VISIBLE_DEVICES"] == "1,2"
    assert "export CUDA_VISIBLE_DEVICES=1,2\n" in task_script_text(placed, worker0)
    assert "export CUDA_DEVICE_ORDER=PCI_BUS_ID\n" in task_script_text(placed, worker0)
    assert "CUDA_VISIBLE_DEVICES" not in task_script_text(placed, placed.tasks[1])

    box._combos["worker:1"].setCurrentIndex(box._combos["worker:1"].findData("h3"))
    assert box.gpus.note("h3") == "no GPU known on h3 (probe it in Machines)"
    assert box.gpus.shown() == ["gpu box", "h3"]
    assert not checkboxes(box, "gpu box")[0].isChecked()  # the choice survives a rebuild


def test_too_few_gpus_are_refused(qtbot: QtBot) -> None:
    box = gpu_box_for(qtbot, MWM_GPU, ("gpu box", "gpu box"))  # 2 workers x 2 GPUs: needs 4
    with pytest.raises(PlacementError, match="gpu box has too few chosen GPUs for task worker:1"):
        box.preview(MWM_GPU)
    box = gpu_box_for(qtbot, MWM_GPU, ("gpu box", LOCAL_MACHINE))
    box.gpus.set_checked("gpu box", [2])
    with pytest.raises(PlacementError, match=r"too few chosen GPUs for task worker:0 \(needs 2\)"):
        box.preview(MWM_GPU)
    box.gpus.set_checked("gpu box", [])
    with pytest.raises(PlacementError, match="gpu box has no GPU checked for task worker:0"):
        box.preview(MWM_GPU)
    ps = Plan(run_name="ps", strategy=Strategy.PARAMETER_SERVER, device_kind=DeviceKind.GPU, workers=1,
              parameter_servers=1)
    box = gpu_box_for(qtbot, ps, ("gpu box", "h3", "gpu box"))  # coordinator, worker, ps
    box.gpus.set_checked("gpu box", [])  # the coordinator and the ps need no GPU
    assert [t.gpus for t in box.preview(ps).tasks] == [(), (), ()]


def test_cpu_plans_show_no_gpu_picker(qtbot: QtBot) -> None:
    plan = MWM_GPU.with_changes(device_kind="cpu", replicas_per_task=1)
    box = gpu_box_for(qtbot, plan, ("gpu box", LOCAL_MACHINE))
    assert not box.gpus.isVisible() and box.gpus.shown() == []
    assert not [b for b in checkboxes(box, "gpu box") if b.isVisible()]
    placed = box.preview(plan)
    assert all(t.gpus == () for t in placed.tasks)
    assert task_environment(placed, placed.tasks[0])["CUDA_VISIBLE_DEVICES"] == ""
    box.set_plan(MWM_GPU)  # the device kind alone changed: the picker appears
    assert box.gpus.isVisible() and len(checkboxes(box, "gpu box")) == 3
    box.set_plan(plan)
    assert not box.gpus.isVisible()
    box._combos["worker:0"].setCurrentIndex(0)  # every task here: no placement, no picker
    box.set_plan(MWM_GPU)
    assert not box.is_remote() and not box.gpus.isVisible()


# -- the wizard: review page refuses, accepts, and is fed by the Machines panel -----------------
def test_the_review_page_refuses_too_few_gpus(qtbot: QtBot) -> None:
    wizard = RunWizard(FAKE_LOCAL_FACTS, MWM_GPU)
    qtbot.addWidget(wizard)
    wizard.set_machines(MACHINES)
    wizard.set_gpu_facts({"gpu box": FAKE_GPUS[:2]})  # this machine: from its facts
    wizard.show()
    qtbot.waitExposed(wizard)
    assert wizard.strategy_page.device_kind() == "gpu"
    while wizard.currentId() != PAGE_REVIEW:
        wizard.next()
    review = wizard.review_page
    box = review.machines_box
    assert box.gpus.isVisible() is False  # every task on this machine at first
    box._combos["worker:0"].setCurrentIndex(box._combos["worker:0"].findData("gpu box"))
    assert box.gpus.shown() == ["gpu box", LOCAL_MACHINE]
    assert [b.text()[:3] for b in checkboxes(box, LOCAL_MACHINE)] == ["0: ", "1: "]
    launch = wizard.button(QWizard.WizardButton.FinishButton)
    export = wizard.button(QWizard.WizardButton.CustomButton1)
    assert review.isComplete() and launch.isEnabled() and not review.warnings.isVisible()
    assert [t.gpus for t in review.placed_plan().tasks] == [(0, 1), (0, 1)]

    checkboxes(box, "gpu box")[1].setChecked(False)  # one GPU left; worker:0 needs 2
    assert "gpu box has too few chosen GPUs for task worker:0 (needs 2)" in review.placement_error
    assert not review.isComplete() and not launch.isEnabled() and not export.isEnabled()
    assert review.warnings.isVisible()
    assert "too few chosen GPUs for task worker:0" in review.warnings.text()
    assert [t.machine_name for t in review.placed_plan().tasks] == ["gpu box", LOCAL_MACHINE]
    wizard.accept()
    assert wizard.result() != QWizard.DialogCode.Accepted

    checkboxes(box, LOCAL_MACHINE)[0].setChecked(False)  # this machine: too few as well
    assert review.placement_error.startswith("gpu box")
    checkboxes(box, "gpu box")[1].setChecked(True)
    assert review.placement_error == ("This machine has too few chosen GPUs for task worker:1 "
                                      "(needs 2).")
    checkboxes(box, LOCAL_MACHINE)[0].setChecked(True)
    assert review.isComplete() and launch.isEnabled() and not review.warnings.isVisible()
    # a machine in use that Machines marks with a cross is named, and may still be launched on
    wizard.set_machine_problems({"gpu box": "Could not connect: timed out.", "other": ""})
    assert review.warnings.isVisible() and review.warnings.text() == (
        "✗ gpu box is marked with a problem in Machines (Could not connect: timed out); the "
        "launch checks it again.")
    assert review.isComplete() and launch.isEnabled()
    with qtbot.waitSignal(wizard.accepted, timeout=60_000):
        wizard.accept()
    plan = wizard.plan()
    assert [(t.machine_name, t.gpus) for t in plan.tasks] == [("gpu box", (0, 1)),
                                                             (LOCAL_MACHINE, (0, 1))]
    assert "export CUDA_VISIBLE_DEVICES=0,1\n" in task_script_text(plan, plan.tasks[0])


def test_the_machines_panel_gives_probed_and_local_gpus(qtbot: QtBot, tmp_path: Path) -> None:
    registry = MachineRegistry(tmp_path / "machines.toml")
    for machine in MACHINES:
        registry.add(machine)
    backend = PlaintextKeyring()
    backend.file_path = str(tmp_path / "keyring.cfg")
    with secrets.using_keyring(backend):
        panel = MachinesPanel(registry=registry, local_facts=lambda: FAKE_LOCAL_FACTS)
        qtbot.addWidget(panel)
        qtbot.waitUntil(panel.ready, timeout=60_000)
    assert panel.gpu_facts() == {LOCAL_MACHINE: FAKE_LOCAL_GPUS}  # nothing probed yet
    panel.states["gpu box"] = RowState("ok", "", RemoteFacts(gpus=list(FAKE_GPUS)))
    panel.states["h3"] = RowState("ok", "", RemoteFacts(gpu_error="nvidia-smi not found"))
    facts = panel.gpu_facts()
    assert facts == {"gpu box": FAKE_GPUS, "h3": [], LOCAL_MACHINE: FAKE_LOCAL_GPUS}

    box = MachinesBox()
    qtbot.addWidget(box)
    box.set_machines(panel.machines())
    box.set_gpu_facts(facts)
    box.set_plan(MWM_GPU)
    box._combos["worker:1"].setCurrentIndex(box._combos["worker:1"].findData("h3"))
    assert box.gpus.shown() == [LOCAL_MACHINE, "h3"]
    assert box.gpus.note("h3") == "no GPU known on h3 (probe it in Machines)"
    assert [t.gpus for t in box.preview(MWM_GPU).tasks] == [(0, 1), ()]


CPU_ONLY_HERE = MachineFacts(hostname="laptop", os_name="Linux", python="3.11", cpu_model="cpu",
                             cpu_cores=4, ram_total=16 << 30, tf=TfView(version="2.21.0"))


def test_a_machine_without_gpus_runs_gpu_training_on_registered_gpu_machines(qtbot: QtBot) -> None:
    """No GPU here, FAKE GPUs on a registered machine: GPU can be chosen, and the review
    refuses to keep the GPU tasks here but accepts them on the GPU machine."""
    wizard = RunWizard(CPU_ONLY_HERE, None)
    qtbot.addWidget(wizard)
    assert not wizard.strategy_page.gpu_radio.isEnabled()
    wizard.set_machines(MACHINES)
    wizard.set_gpu_facts({"gpu box": FAKE_GPUS})
    page = wizard.strategy_page
    assert page.gpu_radio.isEnabled()
    assert page.gpu_radio.text() == "GPU — none usable by TensorFlow here, 3 on gpu box"
    wizard.show()
    qtbot.waitExposed(wizard)
    page.select_strategy("mirrored")
    page.gpu_radio.setChecked(True)
    page.replicas_spin.setValue(2)
    assert "place the tasks on the machines with GPUs" in page.device_note.text()
    assert page.isComplete()
    while wizard.currentId() != PAGE_REVIEW:
        wizard.next()
    review = wizard.review_page
    assert not review.isComplete()  # two GPU replicas here, where TensorFlow has none
    assert any("GPU" in p for p in review.problems())
    box = review.machines_box
    box._combos["worker:0"].setCurrentIndex(box._combos["worker:0"].findData("gpu box"))
    assert review.isComplete(), review.problems()
    plan = wizard.plan()
    assert plan.tasks[0].machine_name == "gpu box" and plan.tasks[0].gpus == (0, 1)
    assert "export CUDA_VISIBLE_DEVICES=0,1\n" in task_script_text(plan, plan.tasks[0])


def test_the_gpus_of_the_last_plan_are_checked_again(qtbot: QtBot) -> None:
    """The last run used GPUs 1 and 2 of "gpu box": a new wizard starts from that choice
    (its facts arrive after the remembered plan, as in the app)."""
    last = gpu_box_for(qtbot, MWM_GPU, ("gpu box", LOCAL_MACHINE))
    last.gpus.set_checked("gpu box", [1, 2])
    placed = last.preview(MWM_GPU)
    assert placed.tasks[0].gpus == (1, 2)

    box = MachinesBox()
    qtbot.addWidget(box)
    box.remember(placed)
    box.set_machines(MACHINES)
    box.set_gpu_facts({"gpu box": FAKE_GPUS})
    box.set_plan(MWM_GPU)
    box.show()
    assert box.assignments() == {"worker:0": "gpu box", "worker:1": LOCAL_MACHINE}
    assert [b.isChecked() for b in checkboxes(box, "gpu box")] == [False, True, True]
    assert box.preview(MWM_GPU).tasks[0].gpus == (1, 2)
