"""Add or edit a machine: where it is, how to sign in, an optional jump host, a test button."""

from __future__ import annotations

import getpass
import os

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.machines.registry import Machine, MachineRegistry, parse_jump_spec
from dtgui.remote.commands import run
from dtgui.remote.connector import Secrets
from dtgui.ui.machines.common import plain_buttons, repolish
from dtgui.ui.machines.connect_flow import Attempt, ConnectFlow, Outcome
from dtgui.ui.machines.slurm_fields import SlurmFields

SECRET_KIND = {"password": "password", "key": "passphrase"}


def _default_key() -> str:
    for name in ("id_ed25519", "id_ecdsa", "id_rsa"):
        if os.path.isfile(os.path.expanduser(f"~/.ssh/{name}")):
            return f"~/.ssh/{name}"
    return ""


class MachineDialog(QDialog):
    """`machine()`, `secret()` and `remember()` hold the answer once accepted."""

    def __init__(self, registry: MachineRegistry | None, machine: Machine | None = None, *,
                 keyring_ok: bool = True, keyring_note: str = "",
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.registry = registry
        self.original = machine
        self.keyring_ok = keyring_ok
        self._touched = False
        self.setWindowTitle(f"Edit {machine.name}" if machine else "Add a machine")
        self.setMinimumWidth(560)

        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("gpu-box-1")
        self.host_edit = QLineEdit()
        self.host_edit.setPlaceholderText("gpu1.lab.example or 192.168.1.20")
        self.port_spin = QSpinBox()
        self.port_spin.setRange(1, 65535)
        self.port_spin.setValue(22)
        self.port_spin.setMinimumWidth(90)
        self.user_edit = QLineEdit()
        self.user_edit.setText(getpass.getuser())
        where = QHBoxLayout()
        where.addWidget(self.host_edit, 1)
        where.addWidget(QLabel("Port"))
        where.addWidget(self.port_spin)

        self.agent_radio = QRadioButton("ssh-agent")
        self.key_radio = QRadioButton("Key file")
        self.password_radio = QRadioButton("Password")
        self.auth_group = QButtonGroup(self)
        auth_row = QHBoxLayout()
        for radio in (self.agent_radio, self.key_radio, self.password_radio):
            self.auth_group.addButton(radio)
            auth_row.addWidget(radio)
        auth_row.addStretch(1)
        self.key_edit = QLineEdit()
        self.key_edit.setPlaceholderText("~/.ssh/id_ed25519")
        self.browse_button = QPushButton("Browse…")
        self.browse_button.clicked.connect(self._browse)
        key_row = QHBoxLayout()
        key_row.addWidget(self.key_edit, 1)
        key_row.addWidget(self.browse_button)
        self.key_row = QWidget()
        self.key_row.setLayout(key_row)
        key_row.setContentsMargins(0, 0, 0, 0)

        self.secret_label = QLabel("Password")
        self.secret_edit = QLineEdit()
        self.secret_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.remember_box = QCheckBox("Remember it in the keyring")
        self.remember_box.setEnabled(keyring_ok)
        self.remember_box.setChecked(keyring_ok)
        self.keyring_note = QLabel(keyring_note)
        self.keyring_note.setObjectName("muted")
        self.keyring_note.setWordWrap(True)
        remember = QVBoxLayout()
        remember.setSpacing(2)
        remember.setContentsMargins(0, 0, 0, 0)
        remember.addWidget(self.remember_box)
        remember.addWidget(self.keyring_note)
        self.remember_row = QWidget()
        self.remember_row.setLayout(remember)
        self.keyring_note.setVisible(bool(keyring_note))

        self.jump_edit = QLineEdit()
        self.jump_edit.setPlaceholderText("none — or a machine's name, or user@host:port")
        self.python_edit = QLineEdit()
        self.python_edit.setObjectName("pythonEdit")
        self.python_edit.setPlaceholderText("python3 — or a path such as /opt/tf/bin/python3")
        self.python_edit.setToolTip(
            "The Python interpreter with TensorFlow on this machine: a full path (a virtual "
            "environment's bin/python3) or a command on its PATH. Empty means python3.\n"
            "The run wizard offers it as \"Python on <machine>\"; launch checks it first.")

        self.form = QFormLayout()
        self.form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        self.form.addRow("Name", self.name_edit)
        self.form.addRow("Host", where)
        self.form.addRow("User", self.user_edit)
        self.form.addRow("Sign in with", auth_row)
        self.form.addRow("Key file", self.key_row)
        self.form.addRow(self.secret_label, self.secret_edit)
        self.form.addRow("", self.remember_row)
        self.form.addRow("Jump host", self.jump_edit)
        self.form.addRow("Python", self.python_edit)
        self.slurm_fields = SlurmFields()

        self.problems_label = QLabel("")
        self.problems_label.setWordWrap(True)
        self.test_button = QPushButton("Test connection")
        self.test_button.clicked.connect(self.test_connection)
        self.test_label = QLabel("")
        self.test_label.setTextFormat(Qt.TextFormat.PlainText)  # a message shows as it is
        self.test_label.setWordWrap(True)
        self.test_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        test_row = QHBoxLayout()
        test_row.addWidget(self.test_button, 0, Qt.AlignmentFlag.AlignTop)
        test_row.addWidget(self.test_label, 1)

        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                        | QDialogButtonBox.StandardButton.Cancel)
        self.ok_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.ok_button.setText("Save" if machine else "Add machine")
        self.ok_button.setObjectName("primaryButton")
        plain_buttons(self.buttons)
        self.buttons.accepted.connect(self._accept_if_valid)
        self.buttons.rejected.connect(self.reject)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 18, 20, 16)
        layout.addLayout(self.form)
        layout.addWidget(self.slurm_fields)
        layout.addWidget(self.problems_label)
        layout.addLayout(test_row)
        layout.addStretch(1)
        layout.addWidget(self.buttons)

        self.flow = ConnectFlow(self, lambda: self.registry, keyring_ok=keyring_ok,
                                keyring_note=keyring_note)
        self._fill(machine)
        for edit in (self.name_edit, self.host_edit, self.user_edit, self.key_edit,
                     self.jump_edit, self.python_edit):
            edit.textChanged.connect(self._changed)
        self.port_spin.valueChanged.connect(self._changed)
        self.auth_group.buttonToggled.connect(self._changed)
        self.slurm_fields.changed.connect(self._changed)
        self._update()

    # -- values ----------------------------------------------------------------------------
    def _fill(self, machine: Machine | None) -> None:
        if machine is None:
            self.password_radio.setChecked(True)
            self.key_edit.setText(_default_key())
            return
        self.name_edit.setText(machine.name)
        self.host_edit.setText(machine.host)
        self.port_spin.setValue(machine.port)
        self.user_edit.setText(machine.user)
        {"agent": self.agent_radio, "key": self.key_radio}.get(
            machine.auth, self.password_radio).setChecked(True)
        self.key_edit.setText(machine.key_file)
        self.jump_edit.setText(machine.jump_host)
        self.python_edit.setText(machine.python)
        self.slurm_fields.fill(machine.slurm)
        self.secret_edit.setPlaceholderText("unchanged (leave empty to keep the remembered one)")

    def auth(self) -> str:
        if self.agent_radio.isChecked():
            return "agent"
        return "key" if self.key_radio.isChecked() else "password"

    def machine(self) -> Machine:
        auth = self.auth()
        return Machine(
            name=self.name_edit.text().strip(), host=self.host_edit.text().strip(),
            port=self.port_spin.value(), user=self.user_edit.text().strip(), auth=auth,
            key_file=self.key_edit.text().strip() if auth == "key" else "",
            jump_host=self.jump_edit.text().strip(), python=self.python_edit.text().strip(),
            slurm=self.slurm_fields.defaults(),
        )

    def secret(self) -> tuple[str, str]:
        """(kind, value): the password or passphrase typed ("" when none)."""
        kind = SECRET_KIND.get(self.auth(), "")
        return kind, self.secret_edit.text() if kind else ""

    def remember(self) -> bool:
        return self.remember_box.isEnabled() and self.remember_box.isChecked()

    def problems(self) -> list[str]:
        machine = self.machine()
        out = machine.problems()
        if self.registry is not None and machine.name:
            other = self.registry.find(machine.name)
            if other is not None and (self.original is None or other.name != self.original.name):
                out.append(f"A machine named {other.name!r} already exists; choose another name.")
        jump = machine.jump_host
        if jump and (self.registry is None or self.registry.find(jump) is None) \
                and parse_jump_spec(jump) is None:
            out.append(f"The jump host {jump!r} is neither a registered machine nor "
                       "user@host:port.")
        if machine.python.startswith("~"):
            out.append("Give the Python interpreter's full path: '~' is not expanded there.")
        return out

    # -- behaviour ---------------------------------------------------------------------------
    def _changed(self, *_: object) -> None:
        self._touched = True
        self._update()

    def _update(self) -> None:
        auth = self.auth()
        self.key_row.setEnabled(auth == "key")
        self.form.setRowVisible(self.key_row, auth == "key")
        has_secret = auth in SECRET_KIND
        for row in (self.secret_edit, self.remember_row):
            self.form.setRowVisible(row, has_secret)
        self.secret_label.setText("Password" if auth == "password" else "Key passphrase")
        if auth == "key" and not self.original:
            self.secret_edit.setPlaceholderText("only if the key file is protected by one")
        elif not self.original:
            self.secret_edit.setPlaceholderText("")
        problems = self.problems()
        self.ok_button.setEnabled(not problems)
        self.test_button.setEnabled(not problems)
        if problems and self._touched:
            repolish(self.problems_label, "errorText")
            self.problems_label.setText("\n".join(f"• {p}" for p in problems))
        elif problems:
            repolish(self.problems_label, "muted")
            self.problems_label.setText("Give a name, the host and the user to sign in as.")
        else:
            self.problems_label.setText("")
        self.problems_label.setVisible(bool(self.problems_label.text()))
        QTimer.singleShot(0, self._fit)

    def _fit(self) -> None:
        """Grow to fit rows that appeared (wrapped labels need their height for the width)."""
        layout = self.layout()
        if layout is None:
            return
        need = (layout.totalHeightForWidth(self.width()) if layout.hasHeightForWidth()
                else layout.totalSizeHint().height())
        need = max(need, layout.totalMinimumSize().height())
        if self.height() < need:
            self.resize(self.width(), need)

    def _browse(self) -> None:
        start = os.path.expanduser(self.key_edit.text().strip() or "~/.ssh")
        dialog = QFileDialog(self, "Choose the private key", start)
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.setOption(QFileDialog.Option.DontUseNativeDialog, True)
        dialog.fileSelected.connect(self._key_chosen)
        dialog.open()

    def _key_chosen(self, path: str) -> None:
        home = os.path.expanduser("~")
        if path.startswith(home + os.sep):
            path = "~" + path[len(home):]
        self.key_edit.setText(path.removesuffix(".pub"))

    def _accept_if_valid(self) -> None:
        self._touched = True
        self._update()
        if not self.problems():
            self.accept()

    def test_connection(self) -> None:
        """Connect with the values typed (in the background) and say how it went."""
        machine = self.machine()
        kind, value = self.secret()
        given = Secrets({machine.name: {kind: value}} if kind and value else None)
        self.test_button.setEnabled(False)
        self._show_test("muted", f"Connecting to {machine.address}…")
        batch = self.flow.start([machine], _whoami, given)
        batch.progress.connect(lambda _n, text: None if batch.finished
                               else self._show_test("muted", text))
        batch.done.connect(self._tested)

    def _tested(self, outcomes: list[Outcome]) -> None:
        self.test_button.setEnabled(not self.problems())
        outcome = outcomes[0]
        if outcome.ok:
            self._show_test("okText", f"✓ {outcome.value}")
        else:
            self._show_test("errorText", f"✗ {outcome.message}")

    def _show_test(self, name: str, text: str) -> None:
        repolish(self.test_label, name)
        self.test_label.setText(text)


def _whoami(attempt: Attempt) -> str:
    machine = attempt.machine
    client = attempt.connect()
    try:
        attempt.report("signed in; asking who we are…")
        code, out, _err = run(client, ["uname", "-snr"], timeout=15)
    finally:
        client.close()
    words = out.split()
    where = f"{words[1]} ({words[0]} {words[2]})" if code == 0 and len(words) >= 3 else machine.host
    return f"Signed in as {machine.user} on {where}."
