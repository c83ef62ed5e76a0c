"""The main window's left column: this machine, and under it the registered machines."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QVBoxLayout, QWidget

from dtgui.ui.pages.local_machine import LocalMachinePanel

if TYPE_CHECKING:
    from dtgui.ui.machines.panel import MachinesPanel


class MachineColumn(QWidget):
    """The machines panel loads paramiko and keyring (~0.4 s): it is built on first use
    (`machines`, which the window asks for just after its first paint), so the window shows
    at once; `panelMade` says when."""

    panelMade = Signal(object)  # the MachinesPanel, once built

    def __init__(self) -> None:
        super().__init__()
        self.machine = LocalMachinePanel()
        self.machine.setMinimumWidth(320)  # the column's width limits both panels
        self._machines: MachinesPanel | None = None
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(6, 0, 0, 6)
        self._layout.addWidget(self.machine, 0)
        self._layout.addStretch(1)
        self.setMinimumWidth(380)
        self.setMaximumWidth(620)

    @property
    def machines(self) -> MachinesPanel:
        if self._machines is None:
            from dtgui.ui.machines.panel import MachinesPanel

            self._machines = MachinesPanel(local_facts=lambda: self.machine.facts)
            self._layout.takeAt(self._layout.count() - 1)  # the stretch
            self._layout.addWidget(self._machines, 1)
            self.panelMade.emit(self._machines)
        return self._machines
