"""The pool's part of the Add-machine dialog: the machine is a pool, in this folder."""

from __future__ import annotations

from PySide6.QtWidgets import QFormLayout, QLineEdit, QWidget

from dtgui.core.machines.registry import KindSettings
from dtgui.ui.machines.kind_fields import KindFields
from dtgui_pool.job import KIND, PoolSettings


class PoolFields(KindFields):
    kind = KIND

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Pool: runs go to a folder of this machine", parent)
        self.setObjectName("poolFields")
        self.folder_edit = QLineEdit()
        form = QFormLayout(self)
        form.addRow("Folder", self.folder_edit)
        self.folder_edit.textChanged.connect(self.changed)
        self.toggled.connect(self.changed)

    def fill(self, settings: KindSettings | None) -> None:
        super().fill(settings)
        self.folder_edit.setText(settings.folder if isinstance(settings, PoolSettings) else "")

    def settings(self) -> PoolSettings | None:
        return PoolSettings(self.folder_edit.text().strip()) if self.isChecked() else None
