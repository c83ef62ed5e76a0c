"""What the machines panel's buttons do: add, edit, remove, import, install a public key,
open the doctor, on the panel that owns them (`PanelHost`: what they need of it, which
`MachinesPanel` is). Every change of the registry or the keyring runs through `run_in_thread`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QDialog, QMessageBox, QWidget

from dtgui.core.machines.hardware import MachineFacts
from dtgui.core.machines.registry import Machine, MachineRegistry, RemoteFacts
from dtgui.remote import secrets as secret_store
from dtgui.remote.connection import ConnectError, install_public_key
from dtgui.remote.connector import Secrets
from dtgui.ui.machines.add_dialog import MachineDialog
from dtgui.ui.machines.connect_flow import Attempt, ConnectFlow, Outcome
from dtgui.ui.machines.import_dialog import ImportDialog
from dtgui.ui.machines.install_key_dialog import InstallKeyDialog
from dtgui.ui.workers import error_message, run_in_thread


@dataclass
class RowState:
    status: str = "unknown"  # unknown | connecting | ok | error
    message: str = ""  # progress while connecting, the plain error, or a note
    facts: RemoteFacts | None = None
    error: ConnectError | None = None


class PanelHost(Protocol):
    """What the actions need of the panel that owns them."""

    registry: MachineRegistry | None
    states: dict[str, RowState]  # each machine's row
    keyring_ok: bool
    keyring_note: str
    flow: ConnectFlow  # the panel's connections
    local_facts: Callable[[], MachineFacts | None]

    def window(self) -> QWidget: ...

    def selected_names(self) -> list[str]: ...

    def refresh(self, names: list[str] | None = None, given: Secrets | None = None) -> None:
        """Connect to these machines (all when None) and show what each has."""

    def rebuild(self) -> None:
        """Show the registry's machines again (after it changed)."""

    def set_message(self, text: str = "", error: bool = False) -> None: ...

    def set_state(self, name: str, status: str, message: str = "",
                  facts: RemoteFacts | None = None, error: ConnectError | None = None) -> None:
        """One machine's row: its status, message, facts and error."""

    def show_dialog(self, dialog: QDialog, flow: ConnectFlow | None = None) -> None:
        """Open a dialog of the panel (`flow`: the dialog's own connections)."""


class MachineActions(QObject):
    """What the panel's buttons do, on the panel it is given (one per panel). `parent`: the
    panel's widget; background work answers only while it exists (run_in_thread's context)."""

    def __init__(self, panel: PanelHost, parent: QObject) -> None:
        super().__init__(parent)
        self.panel = panel

    # -- add / edit / remove / import --------------------------------------------------------------
    def add_machine(self) -> None:
        dialog = MachineDialog(self.panel.registry, keyring_ok=self.panel.keyring_ok,
                               keyring_note=self.panel.keyring_note, parent=self.panel.window())
        dialog.accepted.connect(lambda: self._save(None, dialog))
        self.panel.show_dialog(dialog, dialog.flow)

    def edit_selected(self) -> None:
        names = self.panel.selected_names()
        if len(names) != 1 or self.panel.registry is None:
            return
        dialog = MachineDialog(self.panel.registry, self.panel.registry.get(names[0]),
                               keyring_ok=self.panel.keyring_ok, keyring_note=self.panel.keyring_note,
                               parent=self.panel.window())
        dialog.accepted.connect(lambda: self._save(names[0], dialog))
        self.panel.show_dialog(dialog, dialog.flow)

    def _save(self, old_name: str | None, dialog: MachineDialog) -> None:
        machine, (kind, value), remember = dialog.machine(), dialog.secret(), dialog.remember()
        registry = self.panel.registry
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
                self.panel.states[machine.name] = self.panel.states.pop(old_name, RowState())
            self.panel.rebuild()
            self.panel.set_message(note)
            given = Secrets({machine.name: {kind: value}}) if kind and value else None
            self.panel.refresh([machine.name], given)

        run_in_thread(save, saved, lambda exc: self.panel.set_message(error_message(exc), True),
                      context=self)

    def remove_selected(self, confirm: bool = True) -> None:
        names = self.panel.selected_names()
        if not names:
            return
        if not confirm:
            self._remove(names)
            return
        box = QMessageBox(QMessageBox.Icon.Question, "Remove machines",
                          f"Remove {', '.join(names)}? Their remembered passwords are "
                          "forgotten too.", QMessageBox.StandardButton.Yes
                          | QMessageBox.StandardButton.No, self.panel.window())
        box.accepted.connect(lambda: self._remove(names))
        self.panel.show_dialog(box)

    def _remove(self, names: list[str]) -> None:
        registry = self.panel.registry
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
                    self.panel.states.pop(name, None)
            self.panel.rebuild()
            self.panel.set_message(note, bool(note))

        run_in_thread(remove, removed, lambda exc: self.panel.set_message(error_message(exc), True),
                      context=self)

    def import_config(self, path: Path | None = None) -> None:
        dialog = ImportDialog(self.panel.registry, path, parent=self.panel.window())
        dialog.accepted.connect(lambda: self._import(dialog.chosen()))
        self.panel.show_dialog(dialog)

    def _import(self, machines: list[Machine]) -> None:
        registry = self.panel.registry
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
            self.panel.rebuild()
            self.panel.set_message(" ".join(problems), bool(problems))
            if added:
                self.panel.refresh(added)

        run_in_thread(add_all, done, lambda exc: self.panel.set_message(error_message(exc), True),
                      context=self)

    # -- public key --------------------------------------------------------------------------------
    def install_key(self) -> None:
        names = self.panel.selected_names()
        if len(names) != 1 or self.panel.registry is None:
            return
        dialog = InstallKeyDialog(self.panel.registry.get(names[0]), parent=self.panel.window())
        dialog.accepted.connect(lambda: self._install(dialog.machine, dialog.public_key(),
                                                      dialog.password(), dialog.private_key()
                                                      if dialog.switch_to_key() else ""))
        self.panel.show_dialog(dialog)

    def _install(self, machine: Machine, pub: str, password: str, private: str) -> None:
        def action(attempt: Attempt) -> bool:
            m = attempt.machine
            attempt.report("installing your public key…")
            return install_public_key(m, attempt.secrets.get(m.name, "password"), pub,
                                      timeout=attempt.timeout, registry=attempt.registry)

        self.panel.set_state(machine.name, "connecting", "installing your public key…")
        given = Secrets({machine.name: {"password": password}} if password else None)
        batch = self.panel.flow.start([machine], action, given)
        batch.outcome.connect(lambda o: self._installed(o, private))

    def _installed(self, outcome: Outcome, private: str) -> None:
        machine = outcome.machine
        if not outcome.ok:
            self.panel.set_state(machine.name, "error", outcome.message)
            return
        done = "Your key was installed." if outcome.value else "Your key was already there."
        if not private or self.panel.registry is None:
            self.panel.set_state(machine.name, "unknown", done)
            return
        keyed = replace(machine, auth="key", key_file=private)
        registry = self.panel.registry

        def switched(_: object) -> None:
            self.panel.rebuild()
            self.panel.set_state(machine.name, "unknown", f"{done} It signs in with {private} now.")
            self.panel.refresh([machine.name])

        run_in_thread(lambda: secret_store.update_machine(registry, machine.name, keyed),
                      switched, lambda exc: self.panel.set_message(error_message(exc), True),
                      context=self)

    # -- doctor ------------------------------------------------------------------------------------
    def open_doctor(self) -> None:
        from dtgui.ui.machines.doctor_dialog import DoctorDialog

        if self.panel.registry is None:
            return
        chosen = self.panel.selected_names()
        if len(chosen) < 2:
            chosen = [n for n, s in self.panel.states.items() if s.status == "ok"] or self.panel.registry.names()
        dialog = DoctorDialog(self.panel.registry, self.panel.local_facts(), chosen,
                              keyring_ok=self.panel.keyring_ok, keyring_note=self.panel.keyring_note,
                              parent=self.panel.window())
        self.panel.show_dialog(dialog, dialog.flow)

