"""The machines panel: the registered machines, their status and what each probe found.

Everything that touches the disk, the keyring or the network runs through `run_in_thread`
(connecting and probing through `ConnectFlow`). Dialogs open with `open()`; `dialog` is the
one the panel opened last (add, edit, import, install key, doctor) and `dialogShown` fires
for every dialog, including the host-key and password questions.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.hardware import MachineFacts
from dtgui.core.machines import Machine, MachineRegistry, RemoteFacts
from dtgui.remote import secrets as secret_store
from dtgui.remote.connection import install_public_key
from dtgui.remote.probe import probe
from dtgui.ui.machines import texts
from dtgui.ui.machines.add_dialog import MachineDialog
from dtgui.ui.machines.connect_flow import ConnectFlow, Outcome, Secrets, connect_with
from dtgui.ui.machines.icons import SPINNER_FRAMES, status_icon
from dtgui.ui.machines.import_dialog import ImportDialog
from dtgui.ui.machines.install_key_dialog import InstallKeyDialog
from dtgui.ui.workers import run_in_thread

COLUMNS = ["Machine", "Address", "OS", "Python", "TF", "GPUs"]


@dataclass
class RowState:
    status: str = "unknown"  # unknown | connecting | ok | error
    message: str = ""  # progress while connecting, the plain error, or a note
    facts: RemoteFacts | None = None


class MachinesPanel(QWidget):
    machinesChanged = Signal()
    factsChanged = Signal(str, object)  # machine name, RemoteFacts
    dialogShown = Signal(object)

    def __init__(self, parent: QWidget | None = None, *,
                 local_facts: Callable[[], MachineFacts | None] | None = None,
                 registry: MachineRegistry | None = None) -> None:
        super().__init__(parent)
        self.local_facts = local_facts or (lambda: None)
        self.registry: MachineRegistry | None = None
        self.states: dict[str, RowState] = {}
        self.dialog: QDialog | None = None
        self.keyring_ok, self.keyring_note = True, ""
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
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setHighlightSections(False)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.table.itemDoubleClicked.connect(lambda _: self.edit_selected())
        self.details_label = QLabel("")
        self.details_label.setWordWrap(True)
        self.details_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details_label.setTextFormat(Qt.TextFormat.RichText)
        self.details_label.setMinimumHeight(20)

        def button(text: str, slot: Callable[[], object], tip: str) -> QPushButton:
            b = QPushButton(text)
            b.setToolTip(tip)
            b.clicked.connect(lambda: slot())
            return b

        self.add_button = button("Add…", self.add_machine, "Add a machine by host, user and "
                                 "sign-in method")
        self.import_button = button("Import ~/.ssh/config…", self.import_config,
                                    "Add the hosts of your OpenSSH client config")
        self.edit_button = button("Edit…", self.edit_selected, "Change the selected machine")
        self.remove_button = button("Remove", self.remove_selected,
                                    "Forget the selected machines and their passwords")
        self.refresh_button = button("Refresh", self.refresh, "Connect to the selected "
                                     "machines (all when none is selected) and probe them")
        self.install_button = button("Install my key…", self.install_key,
                                     "Put your public key on the selected machine: a password "
                                     "once, key sign-in after")
        self.doctor_button = button("Doctor…", self.open_doctor, "Compare the machines and test "
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
            run_in_thread(MachineRegistry, self._on_loaded, self._on_load_error, context=self)

    # -- loading -------------------------------------------------------------------------------
    def _on_loaded(self, registry: MachineRegistry) -> None:
        self.registry = registry
        self.states = {m.name: self.states.get(m.name, RowState()) for m in registry.list()}
        self._rebuild()
        self._set_message(registry.message)
        self._update_buttons()

    def _on_load_error(self, text: str) -> None:
        self._set_message(f"The machine list could not be loaded: {text.splitlines()[0]}", True)

    def _on_keyring(self, result: tuple[bool, str]) -> None:
        self.keyring_ok, self.keyring_note = result
        self.flow.keyring_ok, self.flow.keyring_note = result
        if not self.keyring_ok:
            self._set_message(self.keyring_note)

    def _set_message(self, text: str, error: bool = False) -> None:
        if not text and self.registry is not None and not len(self.registry):
            text = ("No machines yet. Add one, or import the hosts of ~/.ssh/config; then "
                    "Refresh connects and shows what each has.")
        self.message_label.setObjectName("errorText" if error else "muted")
        self.message_label.style().polish(self.message_label)
        self.message_label.setText(text)
        self.message_label.setVisible(bool(text))

    def machines(self) -> list[Machine]:
        return self.registry.list() if self.registry is not None else []

    # -- table ---------------------------------------------------------------------------------
    def _rebuild(self) -> None:
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
                (f.tf_error or f.tf_version) if f else "", texts.gpu_tooltip(f) if f else ""]
        for col, (text, tip) in enumerate(zip(cells, tips, strict=True)):
            item = self.table.item(row, col)
            item.setText(text)
            item.setToolTip(tip)
        self.table.item(row, 0).setIcon(status_icon(state.status, self._frame))

    def _set_state(self, name: str, status: str, message: str = "",
                   facts: RemoteFacts | None = None) -> None:
        old = self.states.get(name, RowState())
        self.states[name] = RowState(status, message, facts if facts is not None else old.facts)
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
                self.table.item(row, 0).setIcon(status_icon("connecting", self._frame))
        if not busy:
            self._spinner.stop()

    def selected_names(self) -> list[str]:
        rows = sorted({i.row() for i in self.table.selectedIndexes()})
        machines = self.machines()
        return [machines[r].name for r in rows if r < len(machines)]

    def _update_buttons(self) -> None:
        n = len(self.selected_names())
        loaded = self.registry is not None
        for b in (self.add_button, self.import_button):
            b.setEnabled(loaded)
        self.edit_button.setEnabled(n == 1)
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
                    f"{html.escape(errors[-1][1].message)}</span>") if errors else ""
            self.details_label.setText(text)
            return
        machine = self.registry.get(names[0]) if self.registry else None
        if machine is None:
            return
        state = self.states.get(machine.name, RowState())
        text = texts.details_html(machine, state.facts)
        color = {"error": "#b91c1c", "connecting": "#1d4ed8"}.get(state.status, "#6b7280")
        if state.message:
            text += f"<br><span style='color:{color}'>{html.escape(state.message)}</span>"
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
        registry = self.registry

        def action(machine: Machine, secrets: Secrets, report: Callable[[str], None]):
            client = connect_with(machine, secrets, registry)
            try:
                report("signed in; probing Python, TensorFlow and GPUs…")
                return probe(client)
            finally:
                client.close()

        for m in machines:
            self._set_state(m.name, "connecting", "connecting…")
        batch = self.flow.start(machines, action, given)
        batch.progress.connect(lambda n, t: self._set_state(n, "connecting", t))
        batch.outcome.connect(self._on_probed)

    def _on_probed(self, outcome: Outcome) -> None:
        name = outcome.machine.name
        if outcome.ok:
            facts: RemoteFacts = outcome.value
            self._set_state(name, "ok", "", facts)
            self.factsChanged.emit(name, facts)
        else:
            self._set_state(name, "error", outcome.message)

    # -- add / edit / remove / import --------------------------------------------------------------
    def _show(self, dialog: QDialog) -> None:
        self.dialog = dialog
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        self.dialogShown.emit(dialog)

    def add_machine(self) -> None:
        dialog = MachineDialog(self.registry, keyring_ok=self.keyring_ok,
                               keyring_note=self.keyring_note, parent=self.window())
        dialog.flow.dialogShown.connect(self.dialogShown)
        dialog.accepted.connect(lambda: self._save(None, dialog))
        self._show(dialog)

    def edit_selected(self) -> None:
        names = self.selected_names()
        if len(names) != 1 or self.registry is None:
            return
        dialog = MachineDialog(self.registry, self.registry.get(names[0]),
                               keyring_ok=self.keyring_ok, keyring_note=self.keyring_note,
                               parent=self.window())
        dialog.flow.dialogShown.connect(self.dialogShown)
        dialog.accepted.connect(lambda: self._save(names[0], dialog))
        self._show(dialog)

    def _save(self, old_name: str | None, dialog: MachineDialog) -> None:
        machine, (kind, value), remember = dialog.machine(), dialog.secret(), dialog.remember()
        registry = self.registry
        assert registry is not None

        def save() -> str:
            note = ""
            if old_name is None:
                registry.add(machine)
            else:
                _, note = secret_store.update_machine(registry, old_name, machine)
            if kind and value and remember:
                try:
                    secret_store.set_secret(machine.name, kind, value)
                except secret_store.KeyringUnavailable as exc:
                    note = f"{exc}"
            return note

        def saved(note: str) -> None:
            if old_name is not None and old_name != machine.name:
                self.states[machine.name] = self.states.pop(old_name, RowState())
            self._rebuild()
            self._set_message(note)
            given = Secrets({machine.name: {kind: value}}) if kind and value else None
            self.refresh([machine.name], given)

        run_in_thread(save, saved, lambda t: self._set_message(t.splitlines()[0], True),
                      context=self)

    def remove_selected(self, confirm: bool = True) -> None:
        names = self.selected_names()
        if not names:
            return
        if not confirm:
            self._remove(names)
            return
        box = QMessageBox(QMessageBox.Icon.Question, "Remove machines",
                          f"Remove {', '.join(names)}? Their remembered passwords are "
                          "forgotten too.", QMessageBox.StandardButton.Yes
                          | QMessageBox.StandardButton.No, self.window())
        box.accepted.connect(lambda: self._remove(names))
        self._show(box)

    def _remove(self, names: list[str]) -> None:
        registry = self.registry
        assert registry is not None

        def remove() -> str:
            notes = []
            for name in names:
                try:
                    _, note = secret_store.remove_machine(registry, name)
                except ValueError as exc:  # MachineError: a jump host still in use
                    note = str(exc)
                if note and note not in notes:
                    notes.append(note)
            return " ".join(notes)

        def removed(note: str) -> None:
            for name in names:
                if name not in registry:
                    self.states.pop(name, None)
            self._rebuild()
            self._set_message(note, bool(note))

        run_in_thread(remove, removed, lambda t: self._set_message(t.splitlines()[0], True),
                      context=self)

    def import_config(self, path: Path | None = None) -> None:
        dialog = ImportDialog(self.registry, path, parent=self.window())
        dialog.accepted.connect(lambda: self._import(dialog.chosen()))
        self._show(dialog)

    def _import(self, machines: list[Machine]) -> None:
        registry = self.registry
        assert registry is not None

        def add_all() -> tuple[list[str], list[str]]:
            added, problems = [], []
            for machine in machines:
                try:
                    added.append(registry.add(machine).name)
                except ValueError as exc:
                    problems.append(f"{machine.name}: {exc}")
            return added, problems

        def done(result: tuple[list[str], list[str]]) -> None:
            added, problems = result
            self._rebuild()
            self._set_message(" ".join(problems), bool(problems))
            if added:
                self.refresh(added)

        run_in_thread(add_all, done, lambda t: self._set_message(t.splitlines()[0], True),
                      context=self)

    # -- public key --------------------------------------------------------------------------------
    def install_key(self) -> None:
        names = self.selected_names()
        if len(names) != 1 or self.registry is None:
            return
        dialog = InstallKeyDialog(self.registry.get(names[0]), parent=self.window())
        dialog.accepted.connect(lambda: self._install(dialog.machine, dialog.public_key(),
                                                      dialog.password(), dialog.private_key()
                                                      if dialog.switch_to_key() else ""))
        self._show(dialog)

    def _install(self, machine: Machine, pub: str, password: str, private: str) -> None:
        registry = self.registry

        def action(m: Machine, secrets: Secrets, report: Callable[[str], None]) -> bool:
            report("installing your public key…")
            return install_public_key(m, secrets.get(m.name, "password"), pub,
                                      registry=registry)

        self._set_state(machine.name, "connecting", "installing your public key…")
        given = Secrets({machine.name: {"password": password}} if password else None)
        batch = self.flow.start([machine], action, given)
        batch.outcome.connect(lambda o: self._installed(o, private))

    def _installed(self, outcome: Outcome, private: str) -> None:
        machine = outcome.machine
        if not outcome.ok:
            self._set_state(machine.name, "error", outcome.message)
            return
        done = "Your key was installed." if outcome.value else "Your key was already there."
        if not private or self.registry is None:
            self._set_state(machine.name, "unknown", done)
            return
        keyed = replace(machine, auth="key", key_file=private)
        registry = self.registry

        def switched(_: object) -> None:
            self._rebuild()
            self._set_state(machine.name, "unknown", f"{done} It signs in with {private} now.")
            self.refresh([machine.name])

        run_in_thread(lambda: secret_store.update_machine(registry, machine.name, keyed),
                      switched, lambda t: self._set_message(t.splitlines()[0], True),
                      context=self)

    # -- doctor ------------------------------------------------------------------------------------
    def open_doctor(self) -> None:
        from dtgui.ui.machines.doctor_dialog import DoctorDialog

        if self.registry is None:
            return
        chosen = self.selected_names()
        if len(chosen) < 2:
            chosen = [n for n, s in self.states.items() if s.status == "ok"] or self.registry.names()
        dialog = DoctorDialog(self.registry, self.local_facts(), chosen,
                              keyring_ok=self.keyring_ok, keyring_note=self.keyring_note,
                              parent=self.window())
        dialog.flow.dialogShown.connect(self.dialogShown)
        self._show(dialog)

