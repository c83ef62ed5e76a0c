"""Host key dialogs: accept or reject an unknown key; a refusal for a changed one.

Both are opened with `open()` (window-modal, never blocking the event loop); the caller
listens to `accepted` / `rejected` / `finished`.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QStyle,
    QVBoxLayout,
    QWidget,
)

from dtgui.remote.hostkeys import (
    ChangedHostKeyError,
    UnknownHostKeyError,
    app_known_hosts,
    host_key_name,
)
from dtgui.ui.machines.common import mono_label, plain_buttons


def _lay_out(dialog: QDialog, which: QStyle.StandardPixmap, text: QVBoxLayout,
             buttons: QDialogButtonBox) -> None:
    """The dialog's layout: its icon beside `text`, `buttons` below."""
    icon = QLabel()
    icon.setPixmap(dialog.style().standardIcon(which).pixmap(40, 40))
    icon.setAlignment(Qt.AlignmentFlag.AlignTop)
    top = QHBoxLayout()
    top.addWidget(icon)
    top.addLayout(text, 1)
    layout = QVBoxLayout(dialog)
    layout.setContentsMargins(20, 18, 20, 16)
    layout.addLayout(top)
    layout.addSpacing(8)
    layout.addWidget(buttons)


def _heading(text: str) -> QLabel:
    label = QLabel(text)
    font = label.font()
    font.setPointSizeF(font.pointSizeF() * 1.25)
    font.setWeight(QFont.Weight.Bold)
    label.setFont(font)
    label.setWordWrap(True)
    return label


class HostKeyDialog(QDialog):
    """The first contact with a machine: its fingerprint, to trust or reject."""

    def __init__(self, error: UnknownHostKeyError, machine_name: str = "",
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.error = error
        name = machine_name or error.machine or error.host
        self.setWindowTitle(f"New host key — {name}")
        self.setMinimumWidth(620)

        heading = _heading(f"First connection to {name}")
        intro = QLabel(
            f"dtgui has not seen the host key of <b>{host_key_name(error.host, error.port)}</b> "
            "before. Trust it only if the fingerprint below is the machine's own. On the machine "
            "(or ask its administrator), this command shows it:"
        )
        intro.setWordWrap(True)
        intro.setTextFormat(Qt.TextFormat.RichText)
        command = mono_label("ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub"
                             if error.key_type == "ssh-ed25519"
                             else "ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub", "command")

        self.fingerprint_label = mono_label(error.fingerprint, "fingerprint")
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        form.addRow("Host", QLabel(error.host))
        form.addRow("Port", QLabel(str(error.port)))
        form.addRow("Key type", QLabel(error.key_type))
        form.addRow("SHA256 fingerprint", self.fingerprint_label)

        note = QLabel(f"A trusted key is kept in {app_known_hosts()}.")
        note.setObjectName("muted")
        note.setWordWrap(True)

        self.trust_button = QPushButton("Trust and connect")
        self.trust_button.setObjectName("primaryButton")
        self.reject_button = QPushButton("Reject")
        buttons = QDialogButtonBox()
        buttons.addButton(self.reject_button, QDialogButtonBox.ButtonRole.RejectRole)
        buttons.addButton(self.trust_button, QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        # Enter must never trust a key by accident: Trust is never the default button, even
        # when it has the focus; Reject is, and starts with the focus.
        self.trust_button.setAutoDefault(False)
        self.reject_button.setAutoDefault(True)
        self.reject_button.setDefault(True)
        self.reject_button.setFocus()

        text = QVBoxLayout()
        text.addWidget(heading)
        text.addWidget(intro)
        text.addWidget(command)
        text.addSpacing(6)
        text.addLayout(form)
        text.addWidget(note)
        _lay_out(self, QStyle.StandardPixmap.SP_MessageBoxQuestion, text, buttons)


class ChangedKeyDialog(QDialog):
    """A changed host key: the connection was refused. There is no way to accept it here."""

    def __init__(self, error: ChangedHostKeyError, machine_name: str = "",
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.error = error
        name = machine_name or error.machine or error.host
        key_name = host_key_name(error.host, error.port)
        self.setWindowTitle(f"Host key CHANGED — {name}")
        self.setMinimumWidth(720)

        heading = _heading(f"The host key of {name} has changed: connection refused")
        heading.setObjectName("errorText")
        intro = QLabel(
            f"<b>{key_name}</b> offered a different key from the one on record. Someone may be "
            "intercepting the connection (a man-in-the-middle attack), or the machine was "
            "reinstalled. dtgui did not connect and sent no password or key."
        )
        intro.setWordWrap(True)
        self.expected_label = mono_label(
            f"{error.expected_type}  {error.expected_fingerprint}", "fingerprint")
        self.presented_label = mono_label(f"{error.key_type}  {error.fingerprint}", "fingerprint")
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        form.addRow("On record", self.expected_label)
        form.addRow("Offered now", self.presented_label)
        check = QLabel("If you know why the key changed, check the new fingerprint on the "
                       "machine itself:")
        check.setWordWrap(True)
        check_command = mono_label("ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub", "command")
        fix = QLabel("Only when it matches, remove the old key deliberately and connect again:")
        fix.setWordWrap(True)
        self.command_label = mono_label(f"ssh-keygen -R '{key_name}' -f {app_known_hosts()}",
                                        "command")
        self.command_label.setWordWrap(True)
        also = QLabel("(and with -f ~/.ssh/known_hosts if the old key is recorded there)")
        also.setObjectName("muted")

        buttons = plain_buttons(QDialogButtonBox(QDialogButtonBox.StandardButton.Close))
        buttons.rejected.connect(self.reject)
        self.close_button = buttons.button(QDialogButtonBox.StandardButton.Close)

        text = QVBoxLayout()
        text.addWidget(heading)
        text.addWidget(intro)
        text.addSpacing(4)
        text.addLayout(form)
        text.addSpacing(4)
        text.addWidget(check)
        text.addWidget(check_command)
        text.addWidget(fix)
        text.addWidget(self.command_label)
        text.addWidget(also)
        _lay_out(self, QStyle.StandardPixmap.SP_MessageBoxCritical, text, buttons)
