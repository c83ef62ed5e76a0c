"""Where each task runs: this machine or a registered machine, per task.

Shown on the review page. One row per task of the plan's layout (worker 0, worker 1, ... for
MultiWorkerMirrored; coordinator, workers and parameter servers for ParameterServer; the one
task of a single-process strategy), each a choice of "This machine" and the registered
machines; for every remote machine in use, the Python interpreter to run the tasks with (the
machine's registered `python` unless the last plan used another one); for a GPU plan, the GPUs
each machine in use may give its tasks (`GpuPicker`, from `set_gpu_facts`).
`preview(plan)` places the plan for display: addresses are the machines' hosts (this machine:
the address facing them), ports are only indicative - the launch chooses free ones on each
machine, and checks each machine's Python and TensorFlow first. It raises `PlacementError`
when the checked GPUs are too few.

Above the rows, the run's target: this machine, machines over SSH (the rows), or a Slurm
cluster (a registered cluster's login node, or this machine when Slurm's client is here): then
the rows give way to the job's fields (`SlurmBox`), and the tasks are one batch job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.hardware import GpuInfo
from dtgui.core.machines import Machine
from dtgui.core.placement import (
    PlacementError,
    machine_key,
    place_plan,
    task_layout,
)
from dtgui.core.plan import LOCAL_MACHINE, Plan
from dtgui.core.slurm import LOCAL_CLUSTER, SlurmJob
from dtgui.core.slurm_answers import ClusterFacts, Partition
from dtgui.ui.workers import run_in_thread
from dtgui.worker.machine_probe import choose_free_ports

from .common import MULTI_TASK, card, label, muted
from .gpu_picker import GpuPicker
from .slurm_box import SlurmBox, load_last_job, local_login_node, local_partitions

LOCAL_TEXT = "This machine"
RESTART_TIP = ("Off: a failed task stops the whole run. On: every task is stopped and started "
               "again, resuming from the newest checkpoint.")
ROLE_TEXT = {"chief": "coordinator", "worker": "worker", "ps": "parameter server"}
DEFAULT_PYTHON = "python3"
LOCAL_TARGET, SSH_TARGET, SLURM_TARGET = "local", "ssh", "slurm"
LOGIN_NODE_TEXT = "This machine (login node)"


class MachinesBox(QFrame):
    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("machinesBox")
        self._machines: list[Machine] = []
        self._combos: dict[str, QComboBox] = {}
        self._pythons: dict[str, QLineEdit] = {}
        self._remembered: dict[str, str] = {}  # machine -> python (from the last plan)
        self._typed: dict[str, str] = {}  # machine -> python typed in this wizard
        self._filled: dict[str, str] = {}  # machine -> the python its line edit started with
        self._chosen: dict[str, str] = {}
        self._layout_key: tuple[object, ...] = ()
        self._device_kind = "cpu"
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        self._ssh_machines: list[Machine] = []  # registered machines that are no cluster
        self._clusters: list[Machine] = []  # registered Slurm clusters (their login nodes)
        self._login_node = False  # Slurm's client is here: this machine may be a login node
        self._target_chosen = False  # the user picked a target (kept over set_machines)
        self._last_machines: set[str] = set()  # where the remembered plan's tasks ran
        self._partitions: dict[str, list[Partition]] = {}  # cluster -> its probed partitions
        self.local_radio = QRadioButton("This machine")
        self.ssh_radio = QRadioButton("Machines over SSH")
        self.slurm_radio = QRadioButton("Slurm cluster:")
        self.local_radio.setObjectName("targetLocal")
        self.ssh_radio.setObjectName("targetSsh")
        self.slurm_radio.setObjectName("targetSlurm")
        self.target_group = QButtonGroup(self)
        for radio in (self.local_radio, self.ssh_radio, self.slurm_radio):
            self.target_group.addButton(radio)
        self.local_radio.setChecked(True)
        self.cluster_combo = QComboBox()
        self.cluster_combo.setObjectName("clusterChoice")
        self.cluster_combo.setMinimumWidth(200)
        target_row = QHBoxLayout()
        target_row.setContentsMargins(0, 0, 0, 4)
        heading = label("Run on:", wrap=False)
        heading.setStyleSheet("font-weight: bold;")
        target_row.addWidget(heading)
        for widget in (self.local_radio, self.ssh_radio, self.slurm_radio, self.cluster_combo):
            target_row.addWidget(widget)
        target_row.addStretch(1)
        outer.addLayout(target_row)
        self.slurm = SlurmBox()  # the job's fields, for a Slurm target
        self.slurm.changed.connect(self.changed)
        self.slurm.setVisible(False)
        outer.addWidget(self.slurm)
        self.target_group.buttonToggled.connect(self._on_target)
        self.cluster_combo.currentIndexChanged.connect(self._on_cluster)
        # picking a cluster is choosing the Slurm target
        self.cluster_combo.activated.connect(lambda _index: self.slurm_radio.setChecked(True))
        self._update_targets()
        run_in_thread(local_login_node, self._set_login_node, lambda _exc: None, context=self)
        run_in_thread(load_last_job, self.slurm.remember, lambda _exc: None, context=self)
        self.inner = card()
        inner = QVBoxLayout(self.inner)
        inner.setContentsMargins(14, 8, 14, 8)
        inner.setSpacing(0)
        self.grid = QGridLayout()
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setHorizontalSpacing(10)
        self.grid.setVerticalSpacing(4)
        inner.addLayout(self.grid)
        self.gpus = GpuPicker()  # GPU plans: which GPUs each machine in use may give
        self.gpus.changed.connect(self.changed)
        inner.addWidget(self.gpus)
        outer.addWidget(self.inner)
        self.restart = QCheckBox("If a task fails, restart every task from the last checkpoint "
                                 "(up to 3 times)")
        self.restart.setObjectName("restartOnFailure")
        self.restart.setToolTip(RESTART_TIP)
        outer.addWidget(self.restart)
        self.hint = muted()
        outer.addWidget(self.hint)
        self.setVisible(False)

    # -- inputs ----------------------------------------------------------------------------
    def set_machines(self, machines: list[Machine]) -> None:
        """The registered machines: those that are no Slurm cluster take tasks over SSH; the
        clusters take a whole run as one job."""
        self._ssh_machines = [m for m in machines if not m.is_slurm]
        self._clusters = [m for m in machines if m.is_slurm]
        self._machines = list(machines)
        self._layout_key = ()
        self._update_targets()

    def set_gpu_facts(self, facts: Mapping[str, Sequence[GpuInfo]]) -> None:
        """Machine name -> its GPUs, for the GPU picker ("local" = this machine)."""
        self.gpus.set_facts(facts)
        self._update_gpus()

    def set_cluster_facts(self, facts: Mapping[str, ClusterFacts]) -> None:
        """Cluster name -> what the Machines panel's probe found of Slurm: a job for that
        cluster is checked against its partitions."""
        self._partitions = {name: list(f.partitions) for name, f in facts.items()
                            if f.partitions}
        name = self.slurm.cluster
        if name in self._partitions:
            self.slurm.set_partitions(self._partitions[name])

    def remember(self, plan: Plan | None) -> None:
        """Start from the placement and interpreters of a remembered plan."""
        if plan is None:
            return
        self._chosen = {t.task_id: t.machine_name for t in plan.tasks}
        self._last_machines = {t.machine_name for t in plan.tasks}
        if any(not t.is_local for t in plan.tasks):
            self.target_group.blockSignals(True)  # the user has not chosen yet
            self.ssh_radio.setChecked(True)
            self.target_group.blockSignals(False)
        self._remembered = {m: info.python for m, info in plan.machines.items()
                            if info.python}
        if plan.device_kind == "gpu" and plan.machines:
            used: dict[str, set[int]] = {}
            for task in plan.tasks:
                used.setdefault(task.machine_name, set()).update(task.gpus)
            self.gpus.remember(used)

    def set_plan(self, plan: Plan) -> None:
        """Show one row per task of the plan's layout (kept when the layout is the same)."""
        ids = [f"{kind}:{index}" for kind, index in task_layout(plan)]
        key = (tuple(ids), tuple(m.name for m in self._ssh_machines))
        self.setVisible(True)  # the restart choice applies to every run
        self.inner.setVisible(self.target() == SSH_TARGET)
        self.slurm.setVisible(self.target() == SLURM_TARGET)
        self.slurm.set_plan(plan)
        can_resume = plan.checkpoint_every > 0
        self.restart.setEnabled(can_resume)
        if not can_resume:
            self.restart.setChecked(False)
        self.restart.setToolTip(RESTART_TIP if can_resume else
                                "Restarting needs checkpoints: set a checkpoint interval in the "
                                "options (page 2).")
        self._device_kind = plan.device_kind
        if key == self._layout_key:
            self._update_gpus()
            return
        self._chosen.update(self._rows())
        self._layout_key = key
        while self.grid.count():
            item = self.grid.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.hide()
                widget.deleteLater()
        self._python_labels: list[QLabel] = []
        self._combos.clear()
        self._pythons.clear()
        heading = label("Where each process runs", wrap=False)
        heading.setStyleSheet("font-weight: bold;")
        self.grid.addWidget(heading, 0, 0, 1, 4)
        names = [m.name for m in self._ssh_machines]
        for i, tid in enumerate(ids):
            kind = tid.split(":")[0]
            combo = QComboBox()
            combo.setObjectName(f"machineFor:{tid}")
            combo.addItem(LOCAL_TEXT, LOCAL_MACHINE)
            for name in names:
                combo.addItem(name, name)
            wanted = self._chosen.get(tid, LOCAL_MACHINE)
            combo.setCurrentIndex(max(0, combo.findData(wanted)))
            combo.currentIndexChanged.connect(self._on_change)
            row, col = divmod(i, 2)
            self.grid.addWidget(QLabel(f"{tid} ({ROLE_TEXT.get(kind, kind)}):"), row + 1, col * 2)
            self.grid.addWidget(combo, row + 1, col * 2 + 1)
            self._combos[tid] = combo
        self._python_row = (len(ids) + 1) // 2 + 1
        self._rebuild_pythons()
        self._update_gpus()

    # -- outputs ---------------------------------------------------------------------------
    def target(self) -> str:
        """Where the run goes: LOCAL_TARGET, SSH_TARGET (the rows) or SLURM_TARGET."""
        if self.slurm_radio.isChecked() and self.cluster_combo.count():
            return SLURM_TARGET
        return SSH_TARGET if self.ssh_radio.isChecked() and self._ssh_machines else LOCAL_TARGET

    def cluster(self) -> Machine | None:
        """The chosen registered cluster (None: none, or this machine is the login node)."""
        return self.machine(str(self.cluster_combo.currentData() or ""))

    def slurm_job(self, plan: Plan) -> SlurmJob | None:
        """The job the Slurm target asks for (None for another target); not validated."""
        return self.slurm.job(plan) if self.target() == SLURM_TARGET else None

    def _rows(self) -> dict[str, str]:
        """Task -> the machine its row names (whatever the target)."""
        return {tid: machine_key(str(c.currentData())) for tid, c in self._combos.items()}

    def assignments(self) -> dict[str, str]:
        if self.target() != SSH_TARGET:
            return {tid: LOCAL_MACHINE for tid in self._combos}
        return self._rows()

    def remote_names(self) -> list[str]:
        return [m for m in dict.fromkeys(self.assignments().values()) if m != LOCAL_MACHINE]

    def is_remote(self) -> bool:
        return bool(self.remote_names())

    def max_restarts(self) -> int:
        return 3 if self.restart.isChecked() else 0

    def pythons(self) -> dict[str, str]:
        return {m: (e.text().strip() or self._registered_python(m) or DEFAULT_PYTHON)
                for m, e in self._pythons.items()}

    def default_python(self, name: str) -> str:
        """What "Python on <name>" starts with: typed in this wizard, else the last plan's
        choice unless that was the plain default, else the machine's registered interpreter."""
        if name in self._typed:
            return self._typed[name]
        remembered = self._remembered.get(name, "").strip()
        if remembered and remembered != DEFAULT_PYTHON:
            return remembered
        return self._registered_python(name) or remembered or DEFAULT_PYTHON

    def gpu_choice(self) -> dict[str, list[int]]:
        """Machine -> the GPUs checked for it (machines whose GPUs are known; GPU plans only)."""
        return self.gpus.chosen()

    def machine(self, name: str) -> Machine | None:
        return next((m for m in self._machines if m.name == name), None)

    def preview(self, plan: Plan, *, with_gpus: bool = True) -> Plan:
        """The plan placed on the chosen machines, for display and export.

        Raises PlacementError when it cannot be placed (too few GPUs checked on a machine)."""
        assignments = self.assignments()
        used = list(dict.fromkeys(assignments.values()))
        ports = choose_free_ports(len(assignments))
        per_machine = {m: list(ports) for m in used}
        registered = {name: m for name in used if (m := self.machine(name)) is not None}
        pythons = {name: python for name, python in self.pythons().items() if name in used}
        gpus = self.gpu_choice() if with_gpus and plan.device_kind == "gpu" else {}
        for tid, name in assignments.items():
            if name in gpus and not gpus[name] and _holds_replicas(plan, tid):
                where = LOCAL_TEXT if name == LOCAL_MACHINE else name
                raise PlacementError(f"{where} has no GPU checked for task {tid}: check at "
                                     "least one of its GPUs.")
        try:
            return place_plan(plan, assignments, registered, per_machine, pythons=pythons,
                              gpus=gpus, known=self._machines)
        except PlacementError as exc:
            text = str(exc)
            if text.startswith(f"{LOCAL_MACHINE} "):
                text = "This machine" + text[len(LOCAL_MACHINE):]
            raise PlacementError(text) from exc

    # -- internals -------------------------------------------------------------------------
    def _set_login_node(self, found: bool) -> None:
        self._login_node = bool(found)
        self._update_targets()

    def _update_targets(self) -> None:
        """Offer the targets there are; keep the chosen one while it is offered."""
        chosen = self.cluster_combo.currentData()
        self.cluster_combo.blockSignals(True)
        self.cluster_combo.clear()
        for machine in self._clusters:
            self.cluster_combo.addItem(machine.name, machine.name)
        if self._login_node:
            self.cluster_combo.addItem(LOGIN_NODE_TEXT, LOCAL_CLUSTER)
        self.cluster_combo.setCurrentIndex(max(0, self.cluster_combo.findData(chosen)))
        self.cluster_combo.blockSignals(False)
        has_ssh, has_cluster = bool(self._ssh_machines), bool(self.cluster_combo.count())
        self.ssh_radio.setEnabled(has_ssh)
        self.ssh_radio.setToolTip("Each task on a machine of its own, chosen below." if has_ssh
                                  else "No machine is registered: add one under Machines.")
        self.slurm_radio.setEnabled(has_cluster)
        self.cluster_combo.setEnabled(has_cluster)
        self.slurm_radio.setToolTip(
            "The run is one batch job on the cluster's nodes." if has_cluster else
            "No Slurm cluster is registered: add its login node under Machines (Slurm "
            "cluster).")
        self.target_group.blockSignals(True)
        last_cluster = next((m.name for m in self._clusters if m.name in self._last_machines),
                            "")
        if not self._target_chosen and last_cluster:  # the last run was sent there
            self.slurm_radio.setChecked(True)
            self.cluster_combo.blockSignals(True)
            self.cluster_combo.setCurrentIndex(self.cluster_combo.findData(last_cluster))
            self.cluster_combo.blockSignals(False)
        elif not self._target_chosen and has_ssh and self.local_radio.isChecked():
            self.ssh_radio.setChecked(True)  # the rows, "This machine" for every task
        elif (self.ssh_radio.isChecked() and not has_ssh) or (
                self.slurm_radio.isChecked() and not has_cluster):
            self.local_radio.setChecked(True)
        self.target_group.blockSignals(False)
        self._on_cluster()

    def _on_target(self, _button: object = None, checked: bool = True) -> None:
        if not checked:
            return  # the radio turned on says it
        self._target_chosen = True
        self._on_cluster()
        self._layout_key = ()  # the rows' visibility and the Slurm fields change
        self.changed.emit()

    def _on_cluster(self) -> None:
        name = str(self.cluster_combo.currentData() or "")
        if self.target() != SLURM_TARGET or not name or name == self.slurm.cluster:
            return
        self.slurm.set_cluster(name, self.machine(name))
        if name == LOCAL_CLUSTER:  # sinfo here: the job is checked against its partitions
            run_in_thread(local_partitions, self._set_partitions(name), lambda _exc: None,
                          context=self)
        elif name in self._partitions:  # as the Machines panel last probed them
            self.slurm.set_partitions(self._partitions[name])

    def _set_partitions(self, name: str) -> Callable[[object], None]:
        def done(partitions: object) -> None:
            if self.slurm.cluster == name and isinstance(partitions, list):
                self.slurm.set_partitions(partitions)

        return done

    def _on_change(self) -> None:
        self._chosen.update(self._rows())
        self._rebuild_pythons()
        self._update_gpus()
        self.changed.emit()

    def _registered_python(self, name: str) -> str:
        machine = self.machine(name)
        return machine.python.strip() if machine is not None else ""

    def _update_gpus(self) -> None:
        """GPU plans placed on machines: one GPU row per machine in use; else no rows."""
        active = self._device_kind == "gpu" and bool(self._machines) and self.is_remote()
        self.gpus.show_machines(list(dict.fromkeys(self.assignments().values()))
                                if active else [])

    def _rebuild_pythons(self) -> None:
        for name, edit in list(self._pythons.items()):
            if edit.text().strip() != self._filled.get(name):
                self._typed[name] = edit.text().strip()
        for widget in [*self._pythons.values(), *getattr(self, "_python_labels", [])]:
            self.grid.removeWidget(widget)
            widget.hide()  # at once: deleteLater waits for the event loop
            widget.deleteLater()
        self._pythons.clear()
        self._python_labels = []
        for i, name in enumerate(self.remote_names()):
            self._filled[name] = self.default_python(name)
            edit = QLineEdit(self._filled[name])
            edit.setPlaceholderText(self._registered_python(name) or DEFAULT_PYTHON)
            edit.setObjectName(f"pythonFor:{name}")
            edit.setToolTip(f"The Python interpreter (with TensorFlow) the tasks use on {name}: "
                            "checked before launch.")
            text = QLabel(f"Python on {name}:")
            row, col = divmod(i, 2)
            self.grid.addWidget(text, self._python_row + row, col * 2)
            self.grid.addWidget(edit, self._python_row + row, col * 2 + 1)
            self._pythons[name] = edit
            self._python_labels.append(text)
        self.hint.setText(
            "Tasks on other machines: dtgui copies the bundle there over SSH, checks each "
            "machine's Python and TensorFlow, and chooses free ports on each machine at launch "
            "(the ports shown here are indicative)." if self._pythons else "")


def _holds_replicas(plan: Plan, task_id: str) -> bool:
    """Whether a task trains replicas (so takes GPUs): not a coordinator or parameter server."""
    return task_id.startswith("worker:") or plan.strategy not in MULTI_TASK
