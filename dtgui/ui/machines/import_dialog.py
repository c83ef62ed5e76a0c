"""Import machines from an OpenSSH client config (~/.ssh/config): pick which ones."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.machines.registry import AUTH_LABELS, Machine, MachineRegistry
from dtgui.remote.ssh_config import DEFAULT_PATH, read_ssh_config
from dtgui.ui.machines.common import plain_buttons
from dtgui.ui.workers import error_message, run_in_thread


def default_config_path() -> Path:
    return Path(os.path.expanduser(DEFAULT_PATH))


class ImportDialog(QDialog):
    """Reads the file in the background; `chosen()` are the checked machines."""

    def __init__(self, registry: MachineRegistry | None, path: Path | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.registry = registry
        self.path = path or default_config_path()
        self.found: list[Machine] = []
        self.setWindowTitle("Import machines from the SSH config")
        self.setMinimumSize(600, 380)

        self.path_label = QLabel()
        self.path_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.other_button = QPushButton("Other file…")
        self.other_button.clicked.connect(self._choose_file)
        top = QHBoxLayout()
        top.addWidget(self.path_label, 1)
        top.addWidget(self.other_button)
        self.list = QListWidget()
        self.list.itemChanged.connect(self._update)
        self.problems_label = QLabel()
        self.problems_label.setObjectName("muted")
        self.problems_label.setWordWrap(True)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                        | QDialogButtonBox.StandardButton.Cancel)
        self.ok_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.ok_button.setObjectName("primaryButton")
        plain_buttons(self.buttons)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 18, 20, 16)
        layout.addLayout(top)
        layout.addWidget(QLabel("Each <b>Host</b> entry becomes a machine (wildcard entries are "
                                "settings for others and are left out)."))
        layout.addWidget(self.list, 1)
        layout.addWidget(self.problems_label)
        layout.addWidget(self.buttons)
        self.load(self.path)

    def load(self, path: Path) -> None:
        self.path = path
        self.path_label.setText(f"<b>{path}</b> — reading…")
        self.list.clear()
        self.ok_button.setEnabled(False)
        run_in_thread(lambda: read_ssh_config(path), self._on_read, self._on_error, context=self)

    def _on_read(self, result: tuple[list[Machine], list[str]]) -> None:
        self.found, problems = result
        self.path_label.setText(f"<b>{self.path}</b>")
        self.list.blockSignals(True)
        for machine in self.found:
            known = self.registry is not None and machine.name in self.registry
            how = AUTH_LABELS.get(machine.auth, machine.auth)
            if machine.auth == "key":
                how += f" {machine.key_file}"
            via = f", via {machine.jump_host}" if machine.jump_host else ""
            text = f"{machine.name}  —  {machine.address}, {how}{via}"
            item = QListWidgetItem(text + ("   (already added)" if known else ""))
            item.setData(Qt.ItemDataRole.UserRole, machine.name)
            flags = Qt.ItemFlag.ItemIsUserCheckable
            if not known:
                flags |= Qt.ItemFlag.ItemIsEnabled
            item.setFlags(flags)
            item.setCheckState(Qt.CheckState.Unchecked if known else Qt.CheckState.Checked)
            self.list.addItem(item)
        self.list.blockSignals(False)
        if not self.found and not problems:
            problems = ["No Host entries found."]
        self.problems_label.setText("\n".join(f"Not imported: {p}" for p in problems))
        self._update()

    def _on_error(self, exc: BaseException) -> None:
        self.path_label.setText(f"<b>{self.path}</b>")
        self.problems_label.setText(f"Could not read it: {error_message(exc)}")

    def _update(self, *_: object) -> None:
        n = len(self.chosen())
        self.ok_button.setEnabled(n > 0)
        self.ok_button.setText(f"Import {n} machine{'s' if n != 1 else ''}")

    def chosen(self) -> list[Machine]:
        names = {self.list.item(i).data(Qt.ItemDataRole.UserRole)
                 for i in range(self.list.count())
                 if self.list.item(i).checkState() == Qt.CheckState.Checked
                 and self.list.item(i).flags() & Qt.ItemFlag.ItemIsEnabled}
        return [m for m in self.found if m.name in names]

    def _choose_file(self) -> None:
        dialog = QFileDialog(self, "Choose an SSH config file", str(self.path.parent))
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.setOption(QFileDialog.Option.DontUseNativeDialog, True)
        dialog.setFilter(dialog.filter() | dialog.filter().Hidden)
        dialog.fileSelected.connect(lambda p: self.load(Path(p)))
        dialog.open()
