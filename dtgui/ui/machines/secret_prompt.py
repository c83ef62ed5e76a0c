"""Asks for a password or key passphrase when a connection needs one (opened with `open()`)."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

from dtgui.remote.secrets import SecretRequired
from dtgui.ui.machines.common import plain_buttons

TITLES = {"password": "Password", "passphrase": "Key passphrase"}


class SecretPrompt(QDialog):
    def __init__(self, error: SecretRequired, *, keyring_ok: bool, keyring_note: str = "",
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.error = error
        self.kind = error.kind
        title = TITLES.get(error.kind, "Secret")
        self.setWindowTitle(f"{title} for {error.machine}")
        self.setMinimumWidth(480)

        heading = QLabel(f"<b>{title} for {html.escape(error.machine)}</b>")
        message = QLabel(str(error))
        message.setWordWrap(True)
        self.edit = QLineEdit()
        self.edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.edit.setObjectName("secretEdit")
        self.remember = QCheckBox("Remember it in the keyring")
        self.remember.setChecked(False)
        self.remember.setEnabled(keyring_ok)
        note = QLabel(keyring_note or ("It is kept in the OS keyring, never in a file of dtgui."
                                       if keyring_ok else ""))
        note.setObjectName("muted")
        note.setWordWrap(True)
        note.setVisible(bool(note.text()))

        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        form.addRow(title, self.edit)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                   | QDialogButtonBox.StandardButton.Cancel)
        self.ok_button = buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.ok_button.setText("Connect")
        self.ok_button.setObjectName("primaryButton")
        self.ok_button.setEnabled(False)
        self.edit.textChanged.connect(lambda t: self.ok_button.setEnabled(bool(t)))
        plain_buttons(buttons)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 18, 20, 16)
        layout.addWidget(heading)
        layout.addWidget(message)
        layout.addLayout(form)
        layout.addWidget(self.remember)
        layout.addWidget(note)
        layout.addWidget(buttons)
        self.edit.setFocus()

    def secret(self) -> str:
        return self.edit.text()

    def wants_remember(self) -> bool:
        return self.remember.isEnabled() and self.remember.isChecked()
