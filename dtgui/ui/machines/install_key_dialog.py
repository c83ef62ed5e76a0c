"""'Install my public key on this machine': a password once, key sign-in afterwards."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.machines.registry import Machine
from dtgui.ui.machines.common import plain_buttons


def public_keys() -> list[str]:
    """~/.ssh/*.pub, the usual key types first."""
    ssh = Path(os.path.expanduser("~/.ssh"))
    try:
        found = sorted(p.name for p in ssh.glob("*.pub") if p.is_file())
    except OSError:
        found = []
    order = ["id_ed25519.pub", "id_ecdsa.pub", "id_rsa.pub"]
    found.sort(key=lambda n: (order.index(n) if n in order else len(order), n))
    return [f"~/.ssh/{n}" for n in found]


class InstallKeyDialog(QDialog):
    def __init__(self, machine: Machine, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.machine = machine
        self.setWindowTitle(f"Install my public key on {machine.name}")
        self.setMinimumWidth(540)
        intro = QLabel(
            f"Signs in to <b>{machine.address}</b> with its password this once and adds your "
            "public key to <code>~/.ssh/authorized_keys</code> there. From then on dtgui signs "
            "in with the key, and no password is kept."
        )
        intro.setWordWrap(True)
        self.key_combo = QComboBox()
        self.key_combo.setEditable(True)
        self.key_combo.addItems(public_keys())
        self.key_combo.setMinimumWidth(300)
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        row = QHBoxLayout()
        row.addWidget(self.key_combo, 1)
        row.addWidget(browse)
        self.password_edit = QLineEdit()
        self.password_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.password_edit.setPlaceholderText("the password of " + machine.user)
        self.switch_box = QCheckBox("Then sign in to this machine with the matching private key")
        self.switch_box.setChecked(True)
        self.hint = QLabel("")
        self.hint.setObjectName("errorText")
        self.hint.setWordWrap(True)
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        form.addRow("Public key", row)
        form.addRow("Password", self.password_edit)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                   | QDialogButtonBox.StandardButton.Cancel)
        self.ok_button = buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.ok_button.setText("Install key")
        self.ok_button.setObjectName("primaryButton")
        plain_buttons(buttons)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 18, 20, 16)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(self.switch_box)
        layout.addWidget(self.hint)
        layout.addWidget(buttons)
        self.key_combo.currentTextChanged.connect(self._update)
        self._update()

    def public_key(self) -> str:
        return self.key_combo.currentText().strip()

    def private_key(self) -> str:
        """The private key next to the public one ("" when there is none)."""
        pub = self.public_key()
        private = pub.removesuffix(".pub")
        return private if private != pub and os.path.isfile(os.path.expanduser(private)) else ""

    def password(self) -> str:
        return self.password_edit.text()

    def switch_to_key(self) -> bool:
        return self.switch_box.isChecked() and bool(self.private_key())

    def _update(self, *_: object) -> None:
        pub = os.path.expanduser(self.public_key())
        ok = bool(pub) and os.path.isfile(pub)
        self.ok_button.setEnabled(ok)
        if not self.public_key():
            self.hint.setText("No public key found in ~/.ssh: make one with ssh-keygen -t "
                              "ed25519, then come back.")
        elif not ok:
            self.hint.setText(f"{self.public_key()} does not exist.")
        else:
            self.hint.setText("")
        self.switch_box.setEnabled(bool(self.private_key()))

    def _browse(self) -> None:
        dialog = QFileDialog(self, "Choose your public key",
                             os.path.expanduser("~/.ssh"), "Public keys (*.pub)")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.setOption(QFileDialog.Option.DontUseNativeDialog, True)
        dialog.fileSelected.connect(self.key_combo.setEditText)
        dialog.open()
