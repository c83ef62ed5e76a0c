"""The options page's "Optimizer and schedule" group: optimizer, weight decay, learning-rate
schedule, gradient clipping and accumulation, validation and keeping the best model."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QSpinBox,
    QWidget,
)

from dtgui.core.plans.plan import (
    LR_SCHEDULES,
    MAX_ACCUMULATION,
    OPTIMIZERS,
    LrSchedule,
    Optimizer,
    Plan,
)

from .common import as_float, as_int, muted

OPTIMIZER_TEXT = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD with momentum",
                  "rmsprop": "RMSprop"}
SCHEDULE_TEXT = {"constant": "constant", "cosine": "cosine decay",
                 "warmup_cosine": "linear warm-up, then cosine", "step": "step decay"}
DEFAULT_ADAMW_DECAY = 0.01


def _spin(low: int, high: int, value: int, special: str = "", suffix: str = "") -> QSpinBox:
    spin = QSpinBox()
    spin.setRange(low, high)
    spin.setValue(value)
    if special:
        spin.setSpecialValueText(special)
    if suffix:
        spin.setSuffix(suffix)
    spin.setMinimumWidth(120)
    return spin


def _real(low: float, high: float, value: float, decimals: int, step: float,
          special: str = "") -> QDoubleSpinBox:
    spin = QDoubleSpinBox()
    spin.setRange(low, high)
    spin.setDecimals(decimals)
    spin.setSingleStep(step)
    spin.setValue(value)
    if special:
        spin.setSpecialValueText(special)
    spin.setMinimumWidth(120)
    return spin


class OptimizerBox(QGroupBox):
    changed = Signal()

    def __init__(self, learning_rate: QWidget, parent: QWidget | None = None) -> None:
        super().__init__("Optimizer, schedule and validation", parent)
        self.optimizer_combo = QComboBox()
        for key in OPTIMIZERS:
            self.optimizer_combo.addItem(OPTIMIZER_TEXT[key], key)
        self.decay_spin = _real(0.0, 1.0, 0.0, 4, 0.001, "none")
        self.decay_spin.setToolTip("Decoupled weight decay (AdamW, SGD, RMSprop); 0 = none")
        self.momentum_spin = _real(0.0, 0.999, 0.9, 3, 0.01)
        self.schedule_combo = QComboBox()
        for key in LR_SCHEDULES:
            self.schedule_combo.addItem(SCHEDULE_TEXT[key], key)
        self.warmup_spin = _spin(0, 10_000_000, 0, suffix=" steps")
        self.warmup_spin.setToolTip("Steps of linear warm-up from 0 to the learning rate")
        self.step_every_spin = _spin(1, 10_000_000, 1000, suffix=" steps")
        self.step_factor_spin = _real(0.001, 1.0, 0.1, 3, 0.05)
        self.step_factor_spin.setPrefix("× ")
        self.clip_spin = _real(0.0, 1e6, 0.0, 3, 0.1, "off")
        self.clip_spin.setToolTip("Clip the gradient to this global norm (summed over every "
                                  "replica first: one more all-reduce a step); 0 = off")
        self.accumulate_spin = _spin(1, MAX_ACCUMULATION, 1, "off", " micro-batches")
        self.accumulate_spin.setToolTip("Sum the gradients of N batches per update: the update "
                                        "of a batch N times as large, in the same memory")
        self.validate_spin = _spin(0, 10_000_000, 0, "every epoch", " steps")
        self.validate_spin.setToolTip("How often the validation data is evaluated (the model "
                                      "file's make_validation_dataset(); the demo holds out "
                                      "297 digits)")
        self.best_check = QCheckBox("Also keep the model at its best validation loss")
        self.hint = muted()

        grid = QGridLayout(self)
        grid.setHorizontalSpacing(10)
        grid.setVerticalSpacing(6)
        rows = [
            ("Optimizer:", self.optimizer_combo, "Learning rate:", learning_rate),
            ("Weight decay:", self.decay_spin, "Momentum:", self.momentum_spin),
            ("Schedule:", self.schedule_combo, "Warm-up:", self.warmup_spin),
            ("Step decay:", self._pair(self.step_every_spin, self.step_factor_spin),
             "Clip gradient norm:", self.clip_spin),
            ("Accumulate:", self.accumulate_spin, "Validate every:", self.validate_spin),
        ]
        for row, (left, left_widget, right, right_widget) in enumerate(rows):
            grid.addWidget(QLabel(left), row, 0)
            grid.addWidget(left_widget, row, 1)
            grid.addWidget(QLabel(right), row, 2)
            grid.addWidget(right_widget, row, 3)
        grid.addWidget(self.best_check, len(rows), 1, 1, 3)
        grid.addWidget(self.hint, len(rows) + 1, 0, 1, 4)
        grid.setColumnStretch(1, 1)
        grid.setColumnStretch(3, 1)

        for combo in (self.optimizer_combo, self.schedule_combo):
            combo.currentIndexChanged.connect(self._on_change)
        for spin in (self.decay_spin, self.momentum_spin, self.warmup_spin,
                     self.step_every_spin, self.step_factor_spin, self.clip_spin,
                     self.accumulate_spin, self.validate_spin):
            spin.valueChanged.connect(self._on_change)
        self.best_check.toggled.connect(self._on_change)
        self.optimizer_combo.currentIndexChanged.connect(self._default_decay)
        self._sync()

    @staticmethod
    def _pair(first: QWidget, second: QWidget) -> QWidget:
        box = QWidget()
        layout = QHBoxLayout(box)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(first, 1)
        layout.addWidget(second, 1)
        return box

    def apply(self, plan: Plan) -> Plan:
        return plan.with_changes(
            optimizer=Optimizer(self.optimizer_combo.currentData()),
            weight_decay=round(self.decay_spin.value(), 6),
            momentum=round(self.momentum_spin.value(), 6),
            lr_schedule=LrSchedule(self.schedule_combo.currentData()),
            warmup_steps=self.warmup_spin.value(),
            lr_step_every=self.step_every_spin.value(),
            lr_step_factor=round(self.step_factor_spin.value(), 6),
            clip_norm=round(self.clip_spin.value(), 6),
            grad_accumulation=self.accumulate_spin.value(),
            validate_every=self.validate_spin.value(),
            save_best=self.best_check.isChecked(),
        )

    def load(self, plan: Plan) -> None:
        for combo, value in ((self.optimizer_combo, plan.optimizer),
                             (self.schedule_combo, plan.lr_schedule)):
            index = combo.findData(str(value))
            if index >= 0:
                combo.blockSignals(True)
                combo.setCurrentIndex(index)
                combo.blockSignals(False)
        self.decay_spin.setValue(as_float(plan.weight_decay, 0.0))
        self.momentum_spin.setValue(as_float(plan.momentum, 0.9))
        self.warmup_spin.setValue(as_int(plan.warmup_steps, 0))
        self.step_every_spin.setValue(as_int(plan.lr_step_every, 1000))
        self.step_factor_spin.setValue(as_float(plan.lr_step_factor, 0.1))
        self.clip_spin.setValue(as_float(plan.clip_norm, 0.0))
        self.accumulate_spin.setValue(as_int(plan.grad_accumulation, 1))
        self.validate_spin.setValue(as_int(plan.validate_every, 0))
        self.best_check.setChecked(bool(plan.save_best))
        self._sync()

    def set_effective_batch(self, global_batch: int) -> None:
        n = self.accumulate_spin.value()
        self.hint.setText(f"Each update averages {global_batch * n} examples "
                          f"({n} × global batch {global_batch})." if n > 1 else "")

    # -- internals ---------------------------------------------------------------------------
    def _default_decay(self) -> None:
        if self.optimizer_combo.currentData() == "adamw" and self.decay_spin.value() == 0:
            self.decay_spin.setValue(DEFAULT_ADAMW_DECAY)  # AdamW without decay is Adam

    def _on_change(self) -> None:
        self._sync()
        self.changed.emit()

    def _sync(self) -> None:
        """Show only the fields the chosen optimizer and schedule use."""
        optimizer = self.optimizer_combo.currentData()
        schedule = self.schedule_combo.currentData()
        self.decay_spin.setEnabled(optimizer != "adam")
        self.momentum_spin.setEnabled(optimizer == "sgd")
        self.warmup_spin.setEnabled(schedule == "warmup_cosine")
        self.step_every_spin.setEnabled(schedule == "step")
        self.step_factor_spin.setEnabled(schedule == "step")
