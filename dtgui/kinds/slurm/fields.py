"""The Slurm part of a machine's dialog (`KindFields`): the machine is a cluster's login
node, with the defaults of its jobs (`dtgui.kinds.slurm.job.SlurmDefaults`; validated there,
shown by the dialog with the machine's other problems)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFormLayout,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.machines.registry import KindSettings
from dtgui.kinds.slurm.job import JOB_KIND, SlurmDefaults
from dtgui.ui.machines.kind_fields import KindFields


class SlurmFields(KindFields):
    """Checked: the machine is a Slurm cluster's login node; `settings()` its job defaults."""

    kind = JOB_KIND

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Slurm cluster: this machine is its login node", parent)
        self.setObjectName("slurmFields")
        self.setToolTip("Runs sent here are Slurm jobs (sbatch) on the cluster's nodes, not "
                        "processes on this machine. See docs/slurm.md.")
        self.partition_edit = QLineEdit()
        self.partition_edit.setPlaceholderText("the cluster's default partition")
        self.account_edit = QLineEdit()
        self.qos_edit = QLineEdit()
        self.time_edit = QLineEdit()
        self.time_edit.setPlaceholderText("the partition's default — or HH:MM:SS, D-HH:MM")
        self.gpus_spin = QSpinBox()
        self.gpus_spin.setRange(0, 64)
        self.constraint_edit = QLineEdit()
        self.constraint_edit.setPlaceholderText("node features, e.g. a100&ib")
        self.modules_edit = QLineEdit()
        self.modules_edit.setPlaceholderText("modules to load, e.g. cuda/12.2 cudnn")
        self.venv_edit = QLineEdit()
        self.venv_edit.setPlaceholderText("a virtual environment on the shared disk, e.g. ~/envs/tf")
        self.conda_edit = QLineEdit()
        self.conda_edit.setPlaceholderText("or a conda environment's name")
        self.shared_edit = QLineEdit()
        self.shared_edit.setPlaceholderText("dtgui-runs (under your home, on the shared disk)")
        self.body = QWidget()  # shown only for a cluster: the dialog stays short otherwise
        form = QFormLayout(self.body)
        form.setContentsMargins(0, 0, 0, 0)
        outer = QVBoxLayout(self)
        outer.addWidget(self.body)
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        for label, widget in (("Partition", self.partition_edit), ("Account", self.account_edit),
                              ("QoS", self.qos_edit), ("Time limit", self.time_edit),
                              ("GPUs per node", self.gpus_spin),
                              ("Constraint", self.constraint_edit),
                              ("module load", self.modules_edit), ("Virtual env", self.venv_edit),
                              ("Conda env", self.conda_edit), ("Runs folder", self.shared_edit)):
            form.addRow(label, widget)
        self.edits = (self.partition_edit, self.account_edit, self.qos_edit, self.time_edit,
                      self.constraint_edit, self.modules_edit, self.venv_edit, self.conda_edit,
                      self.shared_edit)
        for edit in self.edits:
            edit.textChanged.connect(self.changed)
        self.gpus_spin.valueChanged.connect(self.changed)
        self.toggled.connect(self.body.setVisible)
        self.toggled.connect(self.changed)
        self.body.setVisible(False)

    def fill(self, settings: KindSettings | None) -> None:
        defaults = settings if isinstance(settings, SlurmDefaults) else None
        self.setChecked(defaults is not None)
        d = defaults or SlurmDefaults()
        for edit, value in ((self.partition_edit, d.partition), (self.account_edit, d.account),
                            (self.qos_edit, d.qos), (self.time_edit, d.time_limit),
                            (self.constraint_edit, d.constraint),
                            (self.modules_edit, " ".join(d.modules)), (self.venv_edit, d.venv),
                            (self.conda_edit, d.conda_env),
                            (self.shared_edit, d.shared_dir if defaults else "")):
            edit.setText(value)
        self.gpus_spin.setValue(d.gpus_per_node)

    def settings(self) -> SlurmDefaults | None:
        """The cluster's defaults as typed (not validated), or None: not a cluster."""
        if not self.isChecked():
            return None
        return SlurmDefaults(
            partition=self.partition_edit.text().strip(),
            account=self.account_edit.text().strip(), qos=self.qos_edit.text().strip(),
            time_limit=self.time_edit.text().strip(), gpus_per_node=self.gpus_spin.value(),
            constraint=self.constraint_edit.text().strip(),
            modules=tuple(self.modules_edit.text().replace(",", " ").split()),
            venv=self.venv_edit.text().strip(), conda_env=self.conda_edit.text().strip(),
            shared_dir=self.shared_edit.text().strip() or SlurmDefaults.shared_dir)
