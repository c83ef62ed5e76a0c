"""What the wizard's pages share: the machine facts, the draft plan, and small widget helpers."""

from __future__ import annotations

import math
import time
from typing import Protocol

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontDatabase
from PySide6.QtWidgets import QFormLayout, QFrame, QLabel, QSizePolicy, QWidget

from dtgui.core.machines.hardware import MachineFacts
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Recommendation, Strategy, recommend
from dtgui.worker.model_check_result import ModelCheck

MULTI_TASK = tuple(s for s in Strategy if s.multi_process)


def default_facts() -> MachineFacts:
    """What the wizard assumes when nothing was detected: 2 CPU cores, no GPU."""
    return MachineFacts(hostname="this machine", os_name="", python="", cpu_model="",
                        cpu_cores=2, ram_total=0)


def fresh_run_name(strategy: str) -> str:
    return f"{strategy.replace('_', '-')}-{time.strftime('%Y%m%d-%H%M%S')}"


class PlanPart(Protocol):
    """A page that owns some fields of the plan."""

    def apply(self, plan: Plan) -> Plan: ...


class WizardContext:
    """The facts every page reads and the plan the pages compose together, in page order."""

    def __init__(self, facts: MachineFacts | None, initial: Plan | None) -> None:
        self.facts_given = facts is not None
        self.facts = facts if facts is not None else default_facts()
        self.recommendation: Recommendation = recommend(self.facts)
        self.initial: Plan | None = None
        self.base = Plan()
        self.set_initial(initial)
        self.parts: list[PlanPart] = []
        self.remote_gpus: dict[str, int] = {}  # registered machine -> its probed GPUs
        self.machine_names: list[str] = []  # the registered machines
        # the last model file checked and what its check found (its gradients' size and a
        # batch's step here: the review's forecast)
        self.model_check: tuple[str, ModelCheck] | None = None

    def set_initial(self, initial: Plan | None) -> None:
        """The plan the pages start from (`RunWizard.load_plan`)."""
        self.initial = initial
        log_every = initial.log_every if initial is not None else 1
        if isinstance(log_every, bool) or not isinstance(log_every, int) or not (
                1 <= log_every <= 100_000):
            log_every = 1
        # Fields no page edits come from here; every other field comes from a page.
        self.base = Plan(log_every=log_every)

    @property
    def gpu_count(self) -> int:
        """The most GPUs one machine offers: TensorFlow's usable ones here, or a registered
        machine's probed ones (0 when none is known)."""
        return max([self.facts.usable_gpu_count, *self.remote_gpus.values()])

    @property
    def usable_gpus(self) -> int | None:
        """For validate(): None while TensorFlow has not reported (nothing to check against),
        and when other machines have GPUs (the review checks each machine's GPUs when the
        tasks are placed)."""
        if self.remote_gpus:
            return None
        return self.facts.usable_gpu_count if self.facts.tf is not None else None

    def usable_gpus_for(self, plan: Plan) -> int | None:
        """validate()'s GPU limit for a placed plan: this machine's when every task is here."""
        if plan.tasks and all(t.is_local for t in plan.tasks):
            return self.facts.usable_gpu_count if self.facts.tf is not None else None
        return self.usable_gpus

    def gpu_unavailable_reason(self) -> str:
        if not self.facts_given:
            return "This machine's devices were not detected, so GPUs cannot be chosen."
        if self.facts.tf is None:
            return "TensorFlow has not reported which GPUs it can use yet."
        return self.facts.explanation()

    def draft(self, upto: PlanPart | None = None, base: Plan | None = None) -> Plan:
        """The plan as the pages show it now (only the pages up to `upto` when given)."""
        plan = base if base is not None else self.base
        for part in self.parts:
            plan = part.apply(plan)
            if part is upto:
                break
        return plan


def form_layout() -> QFormLayout:
    form = QFormLayout()
    form.setLabelAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
    form.setHorizontalSpacing(12)
    form.setVerticalSpacing(8)
    return form


def label(text: str = "", *, name: str = "", wrap: bool = True,
          selectable: bool = False) -> QLabel:
    widget = QLabel(text)
    widget.setWordWrap(wrap)
    widget.setTextFormat(Qt.TextFormat.PlainText)
    if name:
        widget.setObjectName(name)
    if selectable:
        widget.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return widget


def muted(text: str = "") -> QLabel:
    widget = label(text, name="muted")
    widget.setStyleSheet("color: #6b7280;")
    # Wrapped hints take the width of their column (a form would keep them narrow).
    widget.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
    return widget


def error_label() -> QLabel:
    """A red label for validation messages; hidden while it has nothing to say."""
    widget = label(name="errorText", selectable=True)
    widget.setStyleSheet("QLabel#errorText { color: #b91c1c; background: #fef2f2;"
                         " border: 1px solid #fecaca; border-radius: 4px; padding: 6px 8px; }")
    widget.setVisible(False)
    return widget


def show_errors(widget: QLabel, errors: list[str]) -> None:
    widget.setText("\n".join(f"✗ {e}" for e in errors))
    widget.setVisible(bool(errors))


def card() -> QFrame:
    frame = QFrame()
    frame.setObjectName("card")
    frame.setFrameShape(QFrame.Shape.StyledPanel)
    frame.setStyleSheet("QFrame#card { background: #ffffff; border: 1px solid #dde1e6;"
                        " border-radius: 6px; }")
    return frame


def monospace() -> QFont:
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    font.setPointSizeF(max(8.0, font.pointSizeF() - 0.5))
    return font




def as_float(value: object, default: float) -> float:
    """A number from a remembered plan's field (which may come from a hand-edited file)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return float(value) if math.isfinite(value) else default


def as_int(value: object, default: int) -> int:
    return int(as_float(value, default))


INVALID_STYLE = "QLineEdit { border: 1px solid #dc2626; border-radius: 3px; padding: 2px 3px; }"


def mark_invalid(widget: QWidget, invalid: bool) -> None:
    """Outline a field in red while a message below names it."""
    widget.setStyleSheet(INVALID_STYLE if invalid else "")
