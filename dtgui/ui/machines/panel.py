"""The machines panel: the registered machines, their status and what each probe found.

Everything that touches the disk, the keyring or the network runs through `run_in_thread`
(connecting and probing through `ConnectFlow`). Dialogs open with `open()`; `dialog` is the
one the panel opened last (add, edit, import, install key, doctor) and `dialogShown` fires
for every dialog, including the host-key and password questions.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.machines.hardware import GpuInfo, MachineFacts
from dtgui.core.machines.registry import KindFacts, Machine, MachineRegistry, RemoteFacts
from dtgui.core.plans.plan import LOCAL_MACHINE
from dtgui.remote import secrets as secret_store
from dtgui.remote.connection import ChangedHostKeyError, ConnectError
from dtgui.remote.connector import Secrets
from dtgui.remote.probe import probe
from dtgui.ui.machines import texts
from dtgui.ui.machines.common import repolish
from dtgui.ui.machines.connect_flow import Attempt, ConnectFlow, Outcome
from dtgui.ui.machines.hostkey_dialog import ChangedKeyDialog
from dtgui.ui.machines.icons import SPINNER_FRAMES, status_icon
from dtgui.ui.machines.panel_actions import MachineActions, RowState
from dtgui.ui.workers import error_message, run_in_thread

COLUMNS = ["Machine", "Address", "OS", "Python", "TF", "GPUs"]


def short_message(state: RowState) -> str:
    """The row's message for the details line: a changed key's long warning in brief."""
    if isinstance(state.error, ChangedHostKeyError):
        return ("The host key has CHANGED since you trusted it: dtgui refused to connect. "
                "Someone may be intercepting the connection, or the machine was reinstalled.")
    return state.message


class MachinesPanel(QWidget):
    machinesChanged = Signal()
    factsChanged = Signal(str, object)  # machine name, RemoteFacts
    dialogShown = Signal(object)  # the dialog just opened (QDialog)

    def __init__(self, parent: QWidget | None = None, *,
                 local_facts: Callable[[], MachineFacts | None] | None = None,
                 registry: MachineRegistry | None = None) -> None:
        super().__init__(parent)
        self.machine_actions = MachineActions(self, self)
        self.local_facts = local_facts or (lambda: None)
        self.registry: MachineRegistry | None = None
        self.states: dict[str, RowState] = {}
        self.dialog: QDialog | None = None
        self.keyring_ok, self.keyring_note = True, ""
        self.keyring_checked = False  # the dialogs that offer "remember" wait for the answer
        self._frame = 0

        self.message_label = QLabel("Loading the machine list…")
        self.message_label.setObjectName("muted")
        self.message_label.setWordWrap(True)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("machinesTable")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.setAlternatingRowColors(True)
        self.table.setShowGrid(False)
        self.table.setWordWrap(False)
        header = self.table.horizontalHeader()
        # every column as wide as its text (the name is never cut off in the narrow left
        # column: the table scrolls sideways instead); the last one takes what is left
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        header.setHighlightSections(False)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.table.itemDoubleClicked.connect(lambda _: self.machine_actions.edit_selected())
        self.details_label = QLabel("")
        self.details_label.setWordWrap(True)
        self.details_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details_label.setTextFormat(Qt.TextFormat.RichText)
        self.details_label.setMinimumHeight(20)
        self.details_label.linkActivated.connect(self._on_link)
        self.table.setMinimumHeight(150)

        def button(text: str, slot: Callable[[], object], tip: str) -> QPushButton:
            b = QPushButton(text)
            b.setToolTip(tip)
            b.clicked.connect(lambda: slot())
            return b

        self.add_button = button("Add…", self.machine_actions.add_machine, "Add a machine by host, user and "
                                 "sign-in method")
        self.import_button = button("Import…", self.machine_actions.import_config,
                                    "Add the hosts of your OpenSSH client config "
                                    "(~/.ssh/config)")
        self.edit_button = button("Edit…", self.machine_actions.edit_selected, "Change the selected machine")
        self.remove_button = button("Remove", self.machine_actions.remove_selected,
                                    "Forget the selected machines and their passwords")
        self.refresh_button = button("Refresh", self.refresh, "Connect to the selected "
                                     "machines (all when none is selected) and probe them")
        self.install_button = button("Install my key…", self.machine_actions.install_key,
                                     "Put your public key on the selected machine: a password "
                                     "once, key sign-in after")
        self.doctor_button = button("Doctor…", self.machine_actions.open_doctor, "Compare the machines and test "
                                    "the network between them before training")
        row1, row2 = QHBoxLayout(), QHBoxLayout()
        for b in (self.add_button, self.import_button, self.edit_button, self.remove_button):
            row1.addWidget(b)
        for b in (self.refresh_button, self.install_button, self.doctor_button):
            row2.addWidget(b)
        row1.addStretch(1)
        row2.addStretch(1)

        box = QGroupBox("Machines")
        inner = QVBoxLayout(box)
        inner.addWidget(self.message_label)
        inner.addWidget(self.table, 1)
        inner.addWidget(self.details_label)
        inner.addLayout(row1)
        inner.addLayout(row2)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(box)

        self.flow = ConnectFlow(self, lambda: self.registry)
        self.flow.dialogShown.connect(self.dialogShown)
        self._spinner = QTimer(self)
        self._spinner.setInterval(110)
        self._spinner.timeout.connect(self._spin)
        self._update_buttons()
        run_in_thread(lambda: (secret_store.available(), secret_store.storage_note()),
                      self._on_keyring, lambda _: None, context=self)
        if registry is not None:
            QTimer.singleShot(0, lambda: self._on_loaded(registry))
        else:
            run_in_thread(_load_registry, self._on_loaded, self._on_load_error, context=self)

    def ready(self) -> bool:
        """The machine list is loaded and the keyring was asked whether it works."""
        return self.registry is not None and self.keyring_checked

    # -- loading -------------------------------------------------------------------------------
    def _on_loaded(self, registry: MachineRegistry) -> None:
        from dtgui.launch.drivers import plugin_problems

        self.registry = registry
        self.states = {m.name: self.states.get(m.name, RowState()) for m in registry.machines()}
        self.rebuild()
        # a target plugin that cannot be used is said here, where the machines are
        problems = plugin_problems()
        self.set_message("\n".join(filter(None, [registry.message, *problems])),
                         bool(problems))
        self._update_buttons()

    def _on_load_error(self, exc: BaseException) -> None:
        self.set_message(f"The machine list could not be loaded: {error_message(exc)}", True)

    def _on_keyring(self, result: tuple[bool, str]) -> None:
        self.keyring_ok, self.keyring_note = result
        self.flow.keyring_ok, self.flow.keyring_note = result
        self.keyring_checked = True
        if not self.keyring_ok:
            self.set_message(self.keyring_note)
        self._update_buttons()

    def set_message(self, text: str = "", error: bool = False) -> None:
        """Show `text`; a missing keyring stays mentioned whatever else is shown."""
        parts = [text] if text else []
        if not self.keyring_ok and self.keyring_note and self.keyring_note not in text:
            parts.append(self.keyring_note)
        if not parts and self.registry is not None and not len(self.registry):
            parts = ["No machines yet. Add one, or import the hosts of ~/.ssh/config; then "
                     "Refresh connects and shows what each has."]
        text = "\n".join(parts)
        repolish(self.message_label, "errorText" if error else "muted")
        self.message_label.setText(text)
        self.message_label.setVisible(bool(text))

    def machines(self) -> list[Machine]:
        return self.registry.machines() if self.registry is not None else []

    def gpu_facts(self) -> dict[str, list[GpuInfo]]:
        """Machine -> the GPUs its last probe found (machines not probed yet are left out),
        and "local" -> this machine's GPUs (NVML) once detected; for the wizard's GPU picker."""
        out = {m.name: list(state.facts.gpus) for m in self.machines()
               if (state := self.states.get(m.name)) is not None and state.facts is not None}
        local = self.local_facts()
        if local is not None:
            out[LOCAL_MACHINE] = list(local.gpus)
        return out

    def kind_facts(self) -> dict[str, KindFacts]:
        """Machine -> what its kind found there at its last probe (machines not probed, and
        those of no kind's own, are left out); for the wizard's boxes (a cluster's job
        checked against its partitions)."""
        return {m.name: state.facts.kind_facts for m in self.machines()
                if (state := self.states.get(m.name)) is not None and state.facts is not None
                and state.facts.kind_facts is not None}

    def problems(self) -> dict[str, str]:
        """Machine -> the problem its row is marked with (a ✗: its last probe failed)."""
        return {name: short_message(state) for name, state in self.states.items()
                if state.status == "error"}

    # -- table ---------------------------------------------------------------------------------
    def rebuild(self) -> None:
        selected = set(self.selected_names())
        self.table.setRowCount(0)
        for row, machine in enumerate(self.machines()):
            self.table.insertRow(row)
            for col in range(len(COLUMNS)):
                self.table.setItem(row, col, QTableWidgetItem())
            self._fill_row(row, machine)
            if machine.name in selected:
                self.table.selectRow(row)
        self._update_details()
        self.machinesChanged.emit()

    def _cell(self, row: int, col: int) -> QTableWidgetItem:
        item = self.table.item(row, col)
        if item is None:  # _rebuild gives every cell an item; this keeps a stray row drawable
            item = QTableWidgetItem()
            self.table.setItem(row, col, item)
        return item

    def row_of(self, name: str) -> int:
        return next((i for i, m in enumerate(self.machines()) if m.name == name), -1)

    def _fill_row(self, row: int, machine: Machine) -> None:
        state = self.states.setdefault(machine.name, RowState())
        f = state.facts
        cells = [machine.name, texts.short_address(machine),
                 texts.short_os(f) if f else "", f.python_version if f else "",
                 texts.short_tf(f) if f else "", texts.short_gpus(f) if f else ""]
        tips = [state.message or {"unknown": "Not connected yet: press Refresh."}.get(
                    state.status, ""), texts.address_tooltip(machine),
                f.os_name if f else "", f.python_path if f else "",
                f.kind_facts.tf_tip if f and f.kind_facts else (f.tf_error or f.tf_version)
                if f else "",
                texts.gpu_tooltip(f) if f else ""]
        for col, (text, tip) in enumerate(zip(cells, tips, strict=True)):
            item = self._cell(row, col)
            item.setText(text)
            item.setToolTip(tip)
        self._cell(row, 0).setIcon(status_icon(state.status, self._frame))

    def set_state(self, name: str, status: str, message: str = "",
                  facts: RemoteFacts | None = None, error: ConnectError | None = None) -> None:
        old = self.states.get(name, RowState())
        self.states[name] = RowState(status, message, facts if facts is not None else old.facts,
                                     error)
        row = self.row_of(name)
        if row >= 0:
            self._fill_row(row, self.machines()[row])
        if status == "connecting" and not self._spinner.isActive():
            self._spinner.start()
        self._update_details()
        self._update_buttons()

    def _spin(self) -> None:
        self._frame = (self._frame + 1) % SPINNER_FRAMES
        busy = False
        for row, machine in enumerate(self.machines()):
            if self.states.get(machine.name, RowState()).status == "connecting":
                busy = True
                self._cell(row, 0).setIcon(status_icon("connecting", self._frame))
        if not busy:
            self._spinner.stop()

    def selected_names(self) -> list[str]:
        rows = sorted({i.row() for i in self.table.selectedIndexes()})
        machines = self.machines()
        return [machines[r].name for r in rows if r < len(machines)]

    def _update_buttons(self) -> None:
        n = len(self.selected_names())
        loaded = self.registry is not None and self.keyring_checked
        for b in (self.add_button, self.import_button):
            b.setEnabled(loaded)
        self.edit_button.setEnabled(loaded and n == 1)
        self.remove_button.setEnabled(n >= 1)
        self.install_button.setEnabled(n == 1)
        self.refresh_button.setEnabled(loaded and bool(self.machines()))
        self.doctor_button.setEnabled(loaded and bool(self.machines()))
        self._update_details()

    def _update_details(self) -> None:
        names = self.selected_names()
        machines = self.machines()
        if len(names) != 1 and len(machines) == 1:
            names = [machines[0].name]
        if len(names) != 1:
            errors = [(n, s) for n, s in self.states.items() if s.status == "error"]
            text = (f"<span style='color:#b91c1c'>{html.escape(errors[-1][0])}: "
                    f"{html.escape(short_message(errors[-1][1]))}</span>") if errors else (
                "<span style='color:#6b7280'>Select a machine to see everything its probe "
                "found.</span>" if machines else "")
            self.details_label.setText(text)
            return
        machine = self.registry.get(names[0]) if self.registry else None
        if machine is None:
            return
        state = self.states.get(machine.name, RowState())
        text = texts.details_html(machine, state.facts)
        if state.facts is not None and state.status == "error":
            text = text.replace("<br>", " <span style='color:#6b7280'>(as last probed)</span><br>",
                                1)
        color = {"error": "#b91c1c", "connecting": "#1d4ed8"}.get(state.status, "#6b7280")
        if state.message:
            text += f"<br><span style='color:{color}'>{html.escape(short_message(state))}</span>"
        if isinstance(state.error, ChangedHostKeyError):
            text += f" <a href='changed:{html.escape(machine.name)}'>What now?</a>"
        elif state.status == "unknown":
            text += "<br><span style='color:#6b7280'>Not connected yet: press Refresh.</span>"
        self.details_label.setText(text)

    # -- connect and probe -----------------------------------------------------------------------
    def refresh(self, names: list[str] | None = None, given: Secrets | None = None) -> None:
        """Connect to the machines (selected, else all) in parallel and probe them."""
        names = names or self.selected_names() or [m.name for m in self.machines()]
        machines = [m for m in self.machines() if m.name in names]
        busy = {n for n, s in self.states.items() if s.status == "connecting"}
        machines = [m for m in machines if m.name not in busy]
        if not machines:
            return

        from dtgui.launch.drivers import DRIVERS

        def action(attempt: Attempt) -> RemoteFacts:
            client = attempt.connect()
            try:
                machine = attempt.machine
                driver = DRIVERS.get(machine.kind)  # the machine's kind probes its part
                kind_probe = functools.partial(driver.probe_facts, machine) \
                    if driver is not None and driver.probes else None
                attempt.report(f"signed in; {driver.probe_text}…" if kind_probe and driver
                               else "signed in; probing Python, TensorFlow and GPUs…")
                return probe(client, machine.interpreter, kind_probe=kind_probe)
            finally:
                client.close()

        for m in machines:
            self.set_state(m.name, "connecting", "connecting…")
        for m in [m for m in machines if not m.over_ssh]:  # its kind probes it here
            run_in_thread(functools.partial(_probe_here, m),
                          functools.partial(self._on_probed_here, m.name),
                          functools.partial(self._on_probe_failed_here, m.name), context=self)
        machines = [m for m in machines if m.over_ssh]
        if not machines:
            return
        batch = self.flow.start(machines, action, given)
        batch.progress.connect(
            lambda n, t: None if n in batch.outcomes else self.set_state(n, "connecting", t))
        batch.outcome.connect(self._on_probed)

    def _on_probed_here(self, name: str, facts: RemoteFacts) -> None:
        self.set_state(name, "ok", "", facts)
        self.factsChanged.emit(name, facts)

    def _on_probe_failed_here(self, name: str, exc: BaseException) -> None:
        self.set_state(name, "error", error_message(exc))

    def _on_probed(self, outcome: Outcome) -> None:
        name = outcome.machine.name
        if outcome.ok:
            facts: RemoteFacts = outcome.value
            self.set_state(name, "ok", "", facts)
            self.factsChanged.emit(name, facts)
        else:
            self.set_state(name, "error", outcome.message, error=outcome.error)

    def show_dialog(self, dialog: QDialog, flow: ConnectFlow | None = None) -> None:
        """Open `dialog` (the one shown last is `self.dialog`); the dialogs of `flow` (the
        dialog's own connections) are told by `dialogShown` as the panel's are."""
        if flow is not None:
            flow.dialogShown.connect(self.dialogShown)
        self.dialog = dialog
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        self.dialogShown.emit(dialog)

    def _on_link(self, link: str) -> None:
        kind, _, name = link.partition(":")
        error = self.states.get(name, RowState()).error
        if kind == "changed" and isinstance(error, ChangedHostKeyError):
            self.show_dialog(ChangedKeyDialog(error, name, self.window()))


def _load_registry() -> MachineRegistry:
    """The machine list, and the kinds' drivers loaded (off the UI thread)."""
    from dtgui.launch.drivers import plugin_problems

    plugin_problems()  # a plugin's failure is said by name when the list is shown
    return MachineRegistry()


def _probe_here(machine: Machine) -> RemoteFacts:
    """A machine reached without SSH (its kind says): what its kind finds, asked here."""
    from dtgui.launch.drivers import DRIVERS
    from dtgui.remote.commands import LocalRunner

    facts = RemoteFacts(python_command=machine.interpreter)
    driver = DRIVERS.get(machine.kind)
    if driver is not None and driver.probes:
        driver.probe_facts(machine, LocalRunner(), facts)
    return facts
