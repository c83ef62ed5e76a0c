"""The machine dialog's Slurm part: a cluster's login node with its jobs' defaults, kept on
edit, refused with the dialog's other problems when a value could reach a shell."""

from __future__ import annotations

from pathlib import Path

from dtgui.core.machines import Machine, MachineRegistry
from dtgui.core.slurm import SlurmDefaults
from dtgui.ui.machines.add_dialog import MachineDialog

CLUSTER = Machine("hpc", "login.example.org", user="me", auth="agent",
                  slurm=SlurmDefaults(partition="gpu", account="lab", time_limit="04:00:00",
                                      gpus_per_node=4, modules=("cuda/12.2", "cudnn"),
                                      venv="~/envs/tf"))


def test_the_dialog_keeps_and_edits_a_clusters_defaults(qtbot, tmp_path: Path) -> None:
    registry = MachineRegistry(tmp_path / "machines.toml")
    dialog = MachineDialog(registry, CLUSTER)
    qtbot.addWidget(dialog)
    dialog.show()
    fields = dialog.slurm_fields
    assert fields.isChecked() and dialog.machine() == CLUSTER  # nothing lost on edit
    assert fields.body.isVisible()
    fields.partition_edit.setText("gpu;reboot")
    assert not dialog.ok_button.isEnabled() and "partition" in dialog.problems_label.text()
    fields.partition_edit.setText("a100")
    fields.gpus_spin.setValue(8)
    assert dialog.ok_button.isEnabled()
    assert dialog.machine().slurm == SlurmDefaults(
        partition="a100", account="lab", time_limit="04:00:00", gpus_per_node=8,
        modules=("cuda/12.2", "cudnn"), venv="~/envs/tf")
    fields.setChecked(False)
    assert dialog.machine().slurm is None and dialog.ok_button.isEnabled()
    assert not fields.body.isVisible()  # a machine that is no cluster: a short dialog

    plain = MachineDialog(registry, None)
    qtbot.addWidget(plain)
    assert not plain.slurm_fields.isChecked() and plain.machine().slurm is None
