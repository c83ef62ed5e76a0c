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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFrame,
    QGridLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.cluster import (
    PlacementError,
    machine_key,
    place_plan,
    task_layout,
)
from dtgui.core.hardware import GpuInfo
from dtgui.core.machines import Machine
from dtgui.core.plan import LOCAL_MACHINE, Plan
from dtgui.worker.machine_probe import choose_free_ports

from .common import MULTI_TASK, card, label, muted
from .gpu_picker import GpuPicker

LOCAL_TEXT = "This machine"
RESTART_TIP = ("Off: a failed task stops the whole run. On: every task is stopped and started "
               "again, resuming from the newest checkpoint.")
ROLE_TEXT = {"chief": "coordinator", "worker": "worker", "ps": "parameter server"}
DEFAULT_PYTHON = "python3"


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
        self._machines = list(machines)
        self._layout_key = ()

    def set_gpu_facts(self, facts: Mapping[str, Sequence[GpuInfo]]) -> None:
        """Machine name -> its GPUs, for the GPU picker ("local" = this machine)."""
        self.gpus.set_facts(facts)
        self._update_gpus()

    def remember(self, plan: Plan | None) -> None:
        """Start from the placement and interpreters of a remembered plan."""
        if plan is None:
            return
        self._chosen = {t.task_id: t.machine_name for t in plan.tasks}
        self._remembered = {m: info.get("python", "") for m, info in plan.machines.items()
                            if info.get("python")}
        if plan.device_kind == "gpu" and plan.machines:
            used: dict[str, set[int]] = {}
            for task in plan.tasks:
                used.setdefault(task.machine_name, set()).update(task.gpus)
            self.gpus.remember(used)

    def set_plan(self, plan: Plan) -> None:
        """Show one row per task of the plan's layout (kept when the layout is the same)."""
        ids = [f"{kind}:{index}" for kind, index in task_layout(plan)]
        key = (tuple(ids), tuple(m.name for m in self._machines))
        self.setVisible(True)  # the restart choice applies to every run
        self.inner.setVisible(bool(self._machines))
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
        self._chosen.update(self.assignments())
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
        names = [m.name for m in self._machines]
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
    def assignments(self) -> dict[str, str]:
        return {tid: machine_key(str(c.currentData())) for tid, c in self._combos.items()}

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
    def _on_change(self) -> None:
        self._chosen.update(self.assignments())
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
