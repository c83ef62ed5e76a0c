"""A kind's part of the Add-machine dialog: the `KindFields` protocol.

The dialog shows the plain machine's fields (how it is reached) and one box per kind whose
registration names its fields (`dtgui.kinds.Kind.fields`). Checking a box makes the machine
one of that kind (a cluster's login node), with the settings the box holds; at most one is
checked. A kind's fields:

* `kind`, and the box's title (what checking it means);
* `fill`: the settings of the machine being edited (None: it is not of this kind);
* `settings`: the settings as typed (not validated: `Machine.problems` says what is wrong),
  or None when the box is not checked;
* `changed`: a field changed (the dialog checks the machine again).
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QGroupBox, QWidget

from dtgui.core.machines.registry import KindSettings


class KindFields(QGroupBox):
    """One kind's box in the Add-machine dialog; subclasses set `kind` and build the fields
    under the box (shown while it is checked)."""

    changed = Signal()

    kind = ""

    def __init__(self, title: str, parent: QWidget | None = None) -> None:
        super().__init__(title, parent)
        self.setCheckable(True)
        self.setChecked(False)

    def fill(self, settings: KindSettings | None) -> None:
        """The edited machine's settings of this kind (None: not this kind's machine)."""
        self.setChecked(settings is not None)

    def settings(self) -> KindSettings | None:
        """The settings as typed, or None when the machine is not of this kind."""
        raise NotImplementedError
