"""What a kind of target shows in the wizard: the `TargetBox` protocol.

The review page's target choice ("Run on: This machine / Machines over SSH / ...") offers
the plan's own machines (this machine, machines over SSH: their rows in `MachinesBox`) and
one choice per registered box (`dtgui.ui.wizard.target_boxes`). A box holds its kind's own
fields under the choice and gives the job object its driver's `target_of_job` turns into the
target (`dtgui.launch.drivers`); the object travels to `RunSession.launch` as it is. A box:

* `title`, `chooser` (a widget beside its choice, e.g. which cluster), `available`, `tip`,
  `set_machines` (the registered machines; those its kind owns are its driver's `owns`),
  `set_facts` (what the Machines panel's probe found), `last_chosen` (the last run went there);
* `set_plan` and `review`: the plan placed as the job makes it, the job, its problems;
* what the review page shows of it: `task_where`, `note`, `tf_config_text`, `job_file`
  (a tab with the file that is submitted), `launch_tip`;
* `save`: the job sent, kept for the next wizard (off the UI thread).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QWidget

from dtgui.core.machines.registry import Machine
from dtgui.core.plans.plan import Plan


class TargetBox(QFrame):
    """One kind's box. Subclasses set `kind` (their driver's) and `title`, and override what
    applies to them."""

    changed = Signal()  # a field changed: the review places the plan again
    chosen = Signal()  # the user picked something in the chooser: this target is the choice
    offered = Signal()  # what the choice offers changed (`available`, the chooser's items)

    kind = ""
    title = ""  # the choice's text

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)

    # -- the choice ------------------------------------------------------------------------
    def chooser(self) -> QWidget | None:
        """A widget shown beside the choice (None: none)."""
        return None

    def set_machines(self, machines: Sequence[Machine]) -> None:
        """The registered machines."""

    def set_facts(self, facts: Mapping[str, object]) -> None:
        """Machine name -> what the Machines panel's probe found of its kind."""

    def available(self) -> bool:
        return True

    def tip(self) -> str:
        """The choice's tooltip (why it is not offered, when it is not)."""
        return ""

    def last_chosen(self, machines: set[str]) -> bool:
        """Whether the remembered plan's run went to this kind (`machines`: where its tasks
        ran); when it did, the box shows that target."""
        return False

    def set_active(self, active: bool) -> None:
        """Whether this target is the choice."""

    # -- the review ------------------------------------------------------------------------
    def set_plan(self, plan: Plan) -> None:
        """The drafted plan (before `review`)."""

    def review(self, draft: Plan) -> tuple[Plan, object, list[str]]:
        """The plan placed as the job makes it, the job, and why it cannot be sent as typed."""
        raise NotImplementedError

    def task_where(self, job: object, rank: int) -> str:
        """Where the task of `rank` runs, for the review's task list."""
        return ""

    def note(self, placed: Plan, job: object) -> str:
        return ""

    def tf_config_text(self, placed: Plan, job: object, rank: int) -> str | None:
        """The TF_CONFIG shown for the task of `rank` (None: the placement's)."""
        return None

    def job_file(self, placed: Plan, job: object, problems: Sequence[str]) -> tuple[str, str]:
        """The file submitted for the job, shown in a tab: (its name, its text); ("", "")
        for none."""
        return "", ""

    def launch_tip(self) -> str:
        return ""

    def save(self, job: object) -> None:
        """The job sent, kept for the next wizard (runs off the UI thread)."""
