"""The home page: the one-click demo (its plan for this machine) and the way to a new run."""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from dtgui.core.machines.hardware import MachineFacts
from dtgui.core.plans.plan import DeviceKind, Plan
from dtgui.core.plans.strategies import STRATEGIES, Strategy, recommend

# About a minute of training (start-up aside; longer on a busy machine): the step split is
# measured about 20 s into training (its budget: dtgui/worker/step_timing.py), so a first run
# shows where its time goes and leaves time to try Profile N steps… (docs/performance.md).
DEMO_STEPS = 25_000


def demo_plan(facts: MachineFacts | None) -> Plan:
    """The one-click demo: the recommended strategy for this machine on the digits MLP."""
    if facts is None:
        strategy, replicas, device = Strategy.MIRRORED, 2, DeviceKind.CPU
    else:
        rec = recommend(facts)
        strategy, replicas = rec.strategy, rec.replicas
        device = DeviceKind.GPU if facts.usable_gpu_count else DeviceKind.CPU
    return Plan(
        run_name=f"demo-{time.strftime('%Y%m%d-%H%M%S')}",
        strategy=strategy,
        device_kind=device,
        replicas_per_task=replicas,
        steps=DEMO_STEPS,
        steps_per_epoch=28,
        per_replica_batch=32,
        checkpoint_every=100,
        # its 1,500 examples are learnt long before the last step: the model given back is
        # the one at its best validation loss, marked on the curve
        save_best=True,
    )


class HomePage(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        title = QLabel("Train a model on this machine")
        title.setObjectName("pageTitle")
        card = QFrame()
        card.setObjectName("card")
        self.demo_text = QLabel()
        self.demo_text.setWordWrap(True)
        self.train_demo = QPushButton("Train demo")
        self.train_demo.setObjectName("primaryButton")
        self.new_run = QPushButton("New run…")
        buttons = QHBoxLayout()
        buttons.addWidget(self.train_demo)
        buttons.addWidget(self.new_run)
        buttons.addStretch(1)
        card_layout = QVBoxLayout(card)
        card_layout.setContentsMargins(18, 16, 18, 16)
        heading = QLabel("<b>Demo</b>: a small network on the <i>digits</i> data set")
        card_layout.addWidget(heading)
        card_layout.addWidget(self.demo_text)
        card_layout.addLayout(buttons)
        # A run that kept training (or ended) while dtgui was closed: said where the user
        # looks first, with the one button that gets to it.
        self.notice = QFrame()
        self.notice.setObjectName("card")
        self.notice_text = QLabel()
        self.notice_text.setWordWrap(True)
        self.notice_button = QPushButton()
        self.notice_button.setObjectName("primaryButton")
        self._notice_action: Callable[[], None] | None = None
        self.notice_button.clicked.connect(self._notice_clicked)
        notice_layout = QHBoxLayout(self.notice)
        notice_layout.setContentsMargins(18, 12, 18, 12)
        notice_layout.addWidget(self.notice_text, 1)
        notice_layout.addWidget(self.notice_button)
        self.notice.hide()
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.failed = False  # the status says why a launch could not start
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        hint = QLabel(
            "<b>New run…</b> opens the wizard: every tf.distribute strategy this machine can "
            "run, mixed precision and XLA, batch sizes, your own model file, and a review of "
            "every task's TF_CONFIG and command before you launch or export. With machines "
            "added under <b>Machines</b>, the review places each process on one of them."
        )
        hint.setWordWrap(True)
        hint.setObjectName("muted")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(24, 20, 24, 20)
        layout.setSpacing(14)
        layout.addWidget(title)
        layout.addWidget(self.notice)
        layout.addWidget(card)
        layout.addWidget(hint)
        layout.addWidget(self.status)
        layout.addStretch(1)
        self.set_plan_text(demo_plan(None))

    def set_status(self, text: str, failed: bool = False) -> None:
        """The line under the demo: a launch's progress, or why it could not start."""
        self.status.setText(text)
        self.failed = failed

    def show_notice(self, text: str, button: str, action: Callable[[], None]) -> None:
        """The banner above the demo: `text`, and a button `button` that calls `action`."""
        self.notice_text.setText(text)
        self.notice_button.setText(button)
        self._notice_action = action
        self.notice.show()

    def clear_notice(self) -> None:
        self._notice_action = None
        self.notice.hide()

    def _notice_clicked(self) -> None:
        action = self._notice_action
        self.clear_notice()
        if action is not None:
            action()

    def set_plan_text(self, plan: Plan) -> None:
        info = STRATEGIES[plan.strategy]
        where = "logical CPU devices" if plan.device_kind == "cpu" else "GPUs"
        self.demo_text.setText(
            f"1797 real 8×8 handwritten digits (bundled, works offline; 297 held out to "
            f"validate), a 3-layer MLP, "
            f"{plan.steps:,} steps with <b>{info.title}</b> over {plan.total_replicas} "
            f"replica(s) on {where}, global batch {plan.global_batch}. One loss curve per "
            "replica, live; about a minute, long enough to see where the step time goes "
            "(measured about 20 s into training) and to try <i>Profile N steps…</i>."
        )
