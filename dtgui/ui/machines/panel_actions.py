"""What the machines panel's buttons do: add, edit, remove, import, install a public key,
open the doctor. A mixin of `MachinesPanel` (kept apart to keep each module short); every
change of the registry or the keyring runs through `run_in_thread`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtWidgets import QMessageBox

from dtgui.core.machines import Machine, RemoteFacts
from dtgui.remote import secrets as secret_store
from dtgui.remote.connection import ConnectError, install_public_key
from dtgui.ui.machines.add_dialog import MachineDialog
from dtgui.ui.machines.connect_flow import Attempt, Outcome, Secrets
from dtgui.ui.machines.import_dialog import ImportDialog
from dtgui.ui.machines.install_key_dialog import InstallKeyDialog
from dtgui.ui.workers import run_in_thread

if TYPE_CHECKING:
    from collections.abc import Callable

    from PySide6.QtCore import SignalInstance
    from PySide6.QtWidgets import QDialog
    from PySide6.QtWidgets import QWidget as _Panel

    from dtgui.core.hardware import MachineFacts
    from dtgui.core.machines import MachineRegistry
    from dtgui.ui.machines.connect_flow import ConnectFlow
else:
    _Panel = object


@dataclass
class RowState:
    status: str = "unknown"  # unknown | connecting | ok | error
    message: str = ""  # progress while connecting, the plain error, or a note
    facts: RemoteFacts | None = None
    error: ConnectError | None = None


class PanelActions(_Panel):
    """Mixed into MachinesPanel (`self` is the panel)."""

    if TYPE_CHECKING:  # what the actions use of the panel
        dialogShown: SignalInstance
        registry: MachineRegistry | None
        states: dict[str, RowState]
        keyring_ok: bool
        keyring_note: str
        flow: ConnectFlow
        local_facts: Callable[[], MachineFacts | None]

        def selected_names(self) -> list[str]: ...
        def refresh(self, names: list[str] | None = None,
                    given: Secrets | None = None) -> None: ...
        def _show(self, dialog: QDialog) -> None: ...
        def _rebuild(self) -> None: ...
        def _set_message(self, text: str = "", error: bool = False) -> None: ...
        def _set_state(self, name: str, status: str, message: str = "",
                       facts: RemoteFacts | None = None,
                       error: ConnectError | None = None) -> None: ...

    # -- add / edit / remove / import --------------------------------------------------------------
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
        def action(attempt: Attempt) -> bool:
            m = attempt.machine
            attempt.report("installing your public key…")
            return install_public_key(m, attempt.secrets.get(m.name, "password"), pub,
                                      timeout=attempt.timeout, registry=attempt.registry)

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

