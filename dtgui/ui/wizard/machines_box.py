"""Where each task runs (issue 4): this machine or a registered machine, per task.

Shown on the review page. One row per task of the plan's layout (worker 0, worker 1, ... for
MultiWorkerMirrored; coordinator, workers and parameter servers for ParameterServer; the one
task of a single-process strategy), each a choice of "This machine" and the registered
machines; for every remote machine in use, the Python interpreter to run the tasks with.
`preview(plan)` places the plan for display: addresses are the machines' hosts (this machine:
the address facing them), ports are only indicative - the launch chooses free ones on each
machine, and checks each machine's Python and TensorFlow first.
"""

from __future__ import annotations

import socket

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

from dtgui.core.cluster import free_ports, machine_key, place_on_machines, task_layout
from dtgui.core.machines import Machine
from dtgui.core.plan import LOCAL_MACHINE, Plan

from .common import card, label, muted

LOCAL_TEXT = "This machine"
ROLE_TEXT = {"chief": "coordinator", "worker": "worker", "ps": "parameter server"}


def local_address_towards(host: str) -> str:
    """The address of this machine's interface that routes to `host` (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((host, 9))
            return sock.getsockname()[0]
    except OSError:
        return socket.gethostname()


class MachinesBox(QFrame):
    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("machinesBox")
        self._machines: list[Machine] = []
        self._combos: dict[str, QComboBox] = {}
        self._pythons: dict[str, QLineEdit] = {}
        self._remembered: dict[str, str] = {}  # machine -> python (from the last plan)
        self._chosen: dict[str, str] = {}
        self._layout_key: tuple = ()
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        self.inner = card()
        self.grid = QGridLayout(self.inner)
        self.grid.setContentsMargins(14, 8, 14, 8)
        self.grid.setHorizontalSpacing(10)
        self.grid.setVerticalSpacing(4)
        outer.addWidget(self.inner)
        self.restart = QCheckBox("If a task fails, restart every task from the last checkpoint "
                                 "(up to 3 times)")
        self.restart.setObjectName("restartOnFailure")
        self.restart.setToolTip("Off: a failed task stops the whole run. On: every task is "
                                "stopped and started again, resuming from the newest checkpoint "
                                "(set a checkpoint interval in the options).")
        outer.addWidget(self.restart)
        self.hint = muted()
        outer.addWidget(self.hint)
        self.setVisible(False)

    # -- inputs ----------------------------------------------------------------------------
    def set_machines(self, machines: list[Machine]) -> None:
        self._machines = list(machines)
        self._layout_key = ()

    def remember(self, plan: Plan | None) -> None:
        """Start from the placement and interpreters of a remembered plan."""
        if plan is None:
            return
        self._chosen = {t.task_id: t.machine_name for t in plan.tasks}
        self._remembered = {m: info.get("python", "") for m, info in plan.machines.items()
                            if info.get("python")}

    def set_plan(self, plan: Plan) -> None:
        """Show one row per task of the plan's layout (kept when the layout is the same)."""
        ids = [f"{kind}:{index}" for kind, index in task_layout(plan)]
        key = (tuple(ids), tuple(m.name for m in self._machines))
        self.setVisible(bool(self._machines))
        if key == self._layout_key:
            return
        self._chosen.update(self.assignments())
        self._layout_key = key
        while self.grid.count():
            item = self.grid.takeAt(0)
            if item.widget() is not None:
                item.widget().hide()
                item.widget().deleteLater()
        self._python_labels = []
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
        return {m: (e.text().strip() or "python3") for m, e in self._pythons.items()}

    def machine(self, name: str) -> Machine | None:
        return next((m for m in self._machines if m.name == name), None)

    def preview(self, plan: Plan) -> Plan:
        """The plan placed on the chosen machines, for display and export."""
        assignments = self.assignments()
        used = list(dict.fromkeys(assignments.values()))
        hosts = {name: m.host for name in used if (m := self.machine(name)) is not None}
        if LOCAL_MACHINE in used:
            towards = next(iter(hosts.values()), "8.8.8.8")
            hosts[LOCAL_MACHINE] = local_address_towards(towards)
        ports = free_ports(len(assignments))
        per_machine = {m: list(ports) for m in used}
        logins = {name: {"login": m.address, "python": self.pythons().get(name, "python3")}
                  for name in used if (m := self.machine(name)) is not None}
        return place_on_machines(plan, assignments, hosts, per_machine, logins=logins)

    # -- internals -------------------------------------------------------------------------
    def _on_change(self) -> None:
        self._chosen.update(self.assignments())
        self._rebuild_pythons()
        self.changed.emit()

    def _rebuild_pythons(self) -> None:
        for name, edit in list(self._pythons.items()):
            self._remembered[name] = edit.text().strip()
        for widget in [*self._pythons.values(), *getattr(self, "_python_labels", [])]:
            self.grid.removeWidget(widget)
            widget.hide()  # at once: deleteLater waits for the event loop
            widget.deleteLater()
        self._pythons.clear()
        self._python_labels: list[QLabel] = []
        for i, name in enumerate(self.remote_names()):
            edit = QLineEdit(self._remembered.get(name) or "python3")
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
