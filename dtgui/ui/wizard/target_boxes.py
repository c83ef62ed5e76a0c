"""The wizard's boxes of the target kinds, one each (`dtgui.ui.wizard.target_box`).

`BOXES` maps a kind to the class of its box, in the order the target choice offers them
after "This machine" and "Machines over SSH"; a kind is added by its box module and one
`register_box` line below (its driver is registered in `dtgui.launch.drivers`).
"""

from __future__ import annotations

from dtgui.ui.wizard.slurm_box import SlurmBox
from dtgui.ui.wizard.target_box import TargetBox

BOXES: dict[str, type[TargetBox]] = {}


def register_box(box: type[TargetBox]) -> None:
    BOXES[box.kind] = box


register_box(SlurmBox)
