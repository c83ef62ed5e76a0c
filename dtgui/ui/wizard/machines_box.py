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

Above the rows, the run's target: this machine, machines over SSH (the rows), or a kind
whose box is registered (`dtgui.ui.wizard.target_boxes`, e.g. a Slurm cluster): then the rows
give way to that box, whose job (`job()`) the kind's driver turns into the target.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

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

from dtgui.core.machines.hardware import GpuInfo
from dtgui.core.machines.registry import Machine
from dtgui.core.plans.placement import (
    PlacementError,
    machine_key,
    place_plan,
    task_layout,
)
from dtgui.core.plans.plan import LOCAL_MACHINE, Plan
from dtgui.launch.drivers import ssh_machines
from dtgui.worker.machine_probe import choose_free_ports

from .common import MULTI_TASK, card, label, muted
from .gpu_picker import GpuPicker
from .target_box import TargetBox
from .target_boxes import BOXES

LOCAL_TEXT = "This machine"
RESTART_TIP = ("Off: a failed task stops the whole run. On: every task is stopped and started "
               "again, resuming from the newest checkpoint.")
ROLE_TEXT = {"chief": "coordinator", "worker": "worker", "ps": "parameter server"}
DEFAULT_PYTHON = "python3"
LOCAL_TARGET, SSH_TARGET = "local", "ssh"  # the plan's own machines; else a box's kind


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
        self._ssh_machines: list[Machine] = []  # registered machines no box takes
        self._target_chosen = False  # the user picked a target (kept over set_machines)
        self._last_machines: set[str] = set()  # where the remembered plan's tasks ran
        self.local_radio = QRadioButton("This machine")
        self.ssh_radio = QRadioButton("Machines over SSH")
        self.local_radio.setObjectName("targetLocal")
        self.ssh_radio.setObjectName("targetSsh")
        # the registered kinds' boxes, each with its choice (and chooser) in the target row
        self.boxes: dict[str, TargetBox] = {kind: box() for kind, box in BOXES.items()}
        self.radios: dict[str, QRadioButton] = {}
        self.target_group = QButtonGroup(self)
        target_row = QHBoxLayout()
        target_row.setContentsMargins(0, 0, 0, 4)
        heading = label("Run on:", wrap=False)
        heading.setStyleSheet("font-weight: bold;")
        target_row.addWidget(heading)
        for radio in (self.local_radio, self.ssh_radio):
            self.target_group.addButton(radio)
            target_row.addWidget(radio)
        for kind, box in self.boxes.items():
            radio = QRadioButton(box.title)
            radio.setObjectName(f"target:{kind}")
            self.radios[kind] = radio
            self.target_group.addButton(radio)
            target_row.addWidget(radio)
            chooser = box.chooser()
            if chooser is not None:
                target_row.addWidget(chooser)
        self.local_radio.setChecked(True)
        target_row.addStretch(1)
        outer.addLayout(target_row)
        for kind, box in self.boxes.items():
            box.changed.connect(self.changed)
            box.chosen.connect(functools.partial(self.radios[kind].setChecked, True))
            box.offered.connect(self._update_targets)
            box.setVisible(False)
            outer.addWidget(box)
        self.target_group.buttonToggled.connect(self._on_target)
        self._update_targets()
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
        """The registered machines: those no kind owns (`ssh_machines`; a Slurm cluster's
        login node is its kind's) take tasks over SSH."""
        self._ssh_machines = ssh_machines(machines)
        self._machines = list(machines)
        self._layout_key = ()
        for box in self.boxes.values():
            box.blockSignals(True)  # one update of the choice below
            box.set_machines(machines)
            box.blockSignals(False)
        self._update_targets()

    def set_gpu_facts(self, facts: Mapping[str, Sequence[GpuInfo]]) -> None:
        """Machine name -> its GPUs, for the GPU picker ("local" = this machine)."""
        self.gpus.set_facts(facts)
        self._update_gpus()

    def set_target_facts(self, facts: Mapping[str, object]) -> None:
        """Machine name -> what the Machines panel's probe found of its kind (a Slurm
        cluster's partitions), for the boxes."""
        for box in self.boxes.values():
            box.set_facts(facts)

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
        for kind, box in self.boxes.items():
            box.setVisible(self.target() == kind)
            box.set_plan(plan)
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
        """Where the run goes: LOCAL_TARGET, SSH_TARGET (the rows) or a box's kind."""
        for kind, radio in self.radios.items():
            if radio.isChecked() and self.boxes[kind].available():
                return kind
        return SSH_TARGET if self.ssh_radio.isChecked() and self._ssh_machines else LOCAL_TARGET

    def target_box(self) -> TargetBox | None:
        """The box of the chosen target (None: the plan's own machines)."""
        return self.boxes.get(self.target())

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
    def _update_targets(self) -> None:
        """Offer the targets there are; keep the chosen one while it is offered."""
        has_ssh = bool(self._ssh_machines)
        self.ssh_radio.setEnabled(has_ssh)
        self.ssh_radio.setToolTip("Each task on a machine of its own, chosen below." if has_ssh
                                  else "No machine is registered: add one under Machines.")
        for kind, box in self.boxes.items():
            self.radios[kind].setEnabled(box.available())
            self.radios[kind].setToolTip(box.tip())
        self.target_group.blockSignals(True)
        last = "" if self._target_chosen else next(
            (kind for kind, box in self.boxes.items()
             if box.available() and box.last_chosen(self._last_machines)), "")
        if last:  # the last run was sent there
            self.radios[last].setChecked(True)
        elif not self._target_chosen and has_ssh and self.local_radio.isChecked():
            self.ssh_radio.setChecked(True)  # the rows, "This machine" for every task
        elif (self.ssh_radio.isChecked() and not has_ssh) or any(
                self.radios[kind].isChecked() and not box.available()
                for kind, box in self.boxes.items()):
            self.local_radio.setChecked(True)
        self.target_group.blockSignals(False)
        self._activate()

    def _on_target(self, _button: object = None, checked: bool = True) -> None:
        if not checked:
            return  # the radio turned on says it
        self._target_chosen = True
        self._activate()
        self._layout_key = ()  # the rows' visibility and the box's fields change
        self.changed.emit()

    def _activate(self) -> None:
        target = self.target()
        for kind, box in self.boxes.items():
            box.set_active(kind == target)

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
