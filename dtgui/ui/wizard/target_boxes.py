"""The wizard's boxes of the target kinds, one each (`dtgui.ui.wizard.target_box`).

`BOXES` maps a kind to the class of its box, in the order the target choice offers them
after "This machine" and "Machines over SSH": every registered kind whose registration names
a box (`dtgui.kinds.Kind.box`; its driver is registered in `dtgui.launch.drivers`). A box
that fails to load is reported by its kind's name, and the other kinds keep theirs.
"""

from __future__ import annotations

from dtgui.kinds import hooks, report_plugin
from dtgui.ui.wizard.target_box import TargetBox

BOXES: dict[str, type[TargetBox]] = {}


def register_box(box: type[TargetBox]) -> None:
    BOXES[box.kind] = box


for _kind, _box in hooks("box").items():
    if isinstance(_box, type) and issubclass(_box, TargetBox) and _box.kind == _kind:
        register_box(_box)
    else:
        report_plugin(_kind, f"its wizard box is no TargetBox of the kind {_kind!r}")
