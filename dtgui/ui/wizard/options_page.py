"""Page 2: numerics, batch and length, optimizer, reproducibility, checkpoints and the run name."""

from __future__ import annotations

import math
import re

from PySide6.QtCore import Qt
from PySide6.QtGui import QDoubleValidator, QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
    QWizardPage,
)

from dtgui.core.plans.plan import (
    COMMUNICATIONS,
    GRAD_COMPRESSIONS,
    MAX_STEPS_PER_CALL,
    PRECISIONS,
    Communication,
    DemoModel,
    GradCompression,
    Plan,
    Precision,
    validate,
)
from dtgui.core.plans.strategies import STRATEGIES

from .common import (
    WizardContext,
    as_float,
    as_int,
    error_label,
    form_layout,
    fresh_run_name,
    label,
    mark_invalid,
    muted,
    show_errors,
)
from .optimizer_box import OptimizerBox
from .texts import global_batch_text, precision_hint

SCRIPT_OPTIONS_NOTE = (
    "Your own training script: precision, XLA, steps, batch size and learning rate reach it "
    "only as DTGUI_PRECISION, DTGUI_XLA, DTGUI_STEPS, DTGUI_PER_REPLICA_BATCH / "
    "DTGUI_GLOBAL_BATCH and DTGUI_LEARNING_RATE, for it to read; the optimizer is its own.")

ASYNCHRONOUS_NOT_REPRODUCIBLE = (
    "{} trains asynchronously: deterministic ops cannot make its runs repeatable, and they "
    "keep dtgui from timing the workers' steps (Where the time goes), so they are off.")
DIGITS_EXAMPLES = 1500  # the demo trains on 1500 digits and validates on the other 297
AUTO_NAME = re.compile(r"[a-z]+(-[a-z]+)*-\d{8}-\d{6}")  # as fresh_run_name makes
PRECISION_TEXT = {"float32": "float32 (full precision)", "mixed_float16": "mixed_float16",
                  "mixed_bfloat16": "mixed_bfloat16"}
COMMUNICATION_TEXT = {"auto": "auto (TensorFlow chooses)", "ring": "ring", "nccl": "NCCL"}
COMPRESSION_TEXT = {"none": "float32 (uncompressed)", "float16": "float16 (half the bytes)",
                    "bfloat16": "bfloat16 (half the bytes, float32's range)"}
LEVERS_HELP = ("Across machines the all-reduce, not the device, often decides the step: "
               "gradients cast to float16 or bfloat16 cross the network in half the bytes, "
               "are summed there and applied in float32. Packs split the all-reduce so the "
               "last layers' gradients start while the backward pass computes the others.")
ONE_MACHINE_LEVERS = ("On one machine the all-reduce does not cross a network: there is "
                      "nothing for compression or packs to win back.")
SCRIPT_LEVERS = ("Your own script does its own all-reduce: set compression and packs in it "
                 "(the doctor's advice says which).")
MIB = 2**20


def set_item_enabled(combo: QComboBox, index: int, enabled: bool, tooltip: str = "") -> None:
    model = combo.model()
    assert isinstance(model, QStandardItemModel)
    item = model.item(index)
    item.setEnabled(enabled)
    item.setToolTip(tooltip)


def _right(text: str) -> QLabel:
    widget = QLabel(text)
    widget.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return widget


class OptionsPage(QWizardPage):
    def __init__(self, ctx: WizardContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.setTitle("Training options")
        self.setSubTitle("Numerics, batch size, length, optimizer, schedule and validation. "
                         "Combinations that cannot run are refused with the reason below.")

        # Run: name and checkpoints, full width
        self.run_name_edit = QLineEdit()
        self.run_name_edit.setMaxLength(80)
        self.run_name_edit.setToolTip("Letters, digits, '.', '_' and '-'; the run's folder name.")
        self.new_name_button = QPushButton("New name")
        self.new_name_button.setToolTip("A fresh name from the strategy and the time.")
        self.checkpoint_spin = QSpinBox()
        self.checkpoint_spin.setRange(0, 10_000_000)
        self.checkpoint_spin.setSpecialValueText("off")
        self.checkpoint_spin.setSuffix(" steps")
        self.checkpoint_spin.setValue(50)
        self.checkpoint_spin.setToolTip("Save a checkpoint every N steps (0 = off). A new run "
                                        "in the same bundle resumes from the last one.")
        run = QGroupBox("Run")
        rgrid = QGridLayout(run)
        rgrid.setHorizontalSpacing(10)
        rgrid.addWidget(_right("Run name:"), 0, 0)
        rgrid.addWidget(self.run_name_edit, 0, 1)
        rgrid.addWidget(self.new_name_button, 0, 2)
        rgrid.addWidget(_right("Checkpoint every:"), 0, 3)
        rgrid.addWidget(self.checkpoint_spin, 0, 4)
        rgrid.setColumnStretch(1, 1)
        rgrid.setColumnMinimumWidth(3, 130)
        self._run_grid = rgrid

        # Numerics
        self.precision_combo = QComboBox()
        for key in PRECISIONS:
            self.precision_combo.addItem(PRECISION_TEXT[key], key)
        self.precision_hint = muted()
        self.xla_check = QCheckBox("Compile the training step with XLA")
        self.communication_combo = QComboBox()
        for key in COMMUNICATIONS:
            self.communication_combo.addItem(COMMUNICATION_TEXT[key], key)
        self.compression_combo = QComboBox()
        self.compression_combo.setObjectName("gradCompression")
        for key in GRAD_COMPRESSIONS:
            self.compression_combo.addItem(COMPRESSION_TEXT[key], key)
        self.pack_spin = QSpinBox()
        self.pack_spin.setObjectName("bytesPerPack")
        self.pack_spin.setRange(0, 2047)
        self.pack_spin.setSuffix(" MiB")
        self.pack_spin.setSpecialValueText("TensorFlow's")
        numerics = QGroupBox("Numerics")
        nform = form_layout()
        nform.addRow("Precision:", self.precision_combo)
        nform.addRow("", self.precision_hint)
        nform.addRow("XLA:", self.xla_check)
        nform.addRow("All-reduce:", self.communication_combo)
        nform.addRow("On the wire:", self.compression_combo)
        nform.addRow("Packs of:", self.pack_spin)
        numerics.setLayout(nform)

        # Batch and length
        self.batch_spin = QSpinBox()
        self.batch_spin.setRange(1, 65536)
        self.batch_spin.setValue(32)
        self.global_label = label(name="globalBatch", wrap=False)
        self.global_label.setStyleSheet("font-weight: bold; color: #1d4ed8;")
        self.steps_spin = QSpinBox()
        self.steps_spin.setRange(1, 10_000_000)
        self.steps_spin.setValue(100)
        self.spe_spin = QSpinBox()
        self.spe_spin.setRange(1, 10_000_000)
        self.spe_spin.setValue(25)
        self.epochs_spin = QDoubleSpinBox()
        self.epochs_spin.setRange(0.01, 10_000_000.0)
        self.epochs_spin.setDecimals(2)
        self.epochs_spin.setToolTip("Sets the steps to epochs × steps per epoch.")
        self.epoch_hint = muted()
        self.epoch_hint.setTextFormat(Qt.TextFormat.RichText)  # its "use N" link
        self.epoch_hint.linkActivated.connect(lambda steps: self.spe_spin.setValue(int(steps)))
        self.per_call_spin = QSpinBox()
        self.per_call_spin.setRange(0, MAX_STEPS_PER_CALL)
        self.per_call_spin.setSpecialValueText("automatic")
        self.per_call_spin.setToolTip(
            "Training steps run on the device per call from Python (as Keras' "
            "steps_per_execution): more steps per call remove the per-step overhead. "
            "Automatic sizes each call to about 0.2 s, so the curves still update live. "
            "The losses do not depend on it.")
        length = QGroupBox("Batch and length")
        lform = form_layout()
        lform.addRow("Batch per replica:", self.batch_spin)
        lform.addRow("Global batch:", self.global_label)
        lform.addRow("Steps:", self.steps_spin)
        lform.addRow("Steps per epoch:", self.spe_spin)
        lform.addRow("Epochs:", self.epochs_spin)
        lform.addRow("", self.epoch_hint)
        lform.addRow("Steps per call:", self.per_call_spin)
        length.setLayout(lform)

        # Optimizer and reproducibility, full width
        self.lr_edit = QLineEdit("0.001")
        validator = QDoubleValidator(0.0, 10.0, 10, self.lr_edit)
        validator.setNotation(QDoubleValidator.Notation.ScientificNotation)
        self.lr_edit.setValidator(validator)
        self.lr_edit.setToolTip("The learning rate (the peak of a schedule), above 0 and at "
                                "most 10 (e.g. 0.001 or 1e-3).")
        self.seed_spin = QSpinBox()
        self.seed_spin.setRange(0, 2**31 - 1)
        self.seed_spin.setValue(42)
        self.deterministic_check = QCheckBox("Deterministic ops (reproducible, a bit slower)")
        self.deterministic_check.setChecked(True)
        # the strategy the check was last set for: an asynchronous one turns it off once
        self._strategy_seen = ctx.initial.strategy if ctx.initial is not None else None
        seed_row = QHBoxLayout()
        seed_row.addWidget(self.seed_spin)
        seed_row.addSpacing(12)
        seed_row.addWidget(self.deterministic_check)
        seed_row.addStretch(1)
        self._run_grid.addWidget(_right("Seed:"), 1, 0)
        self._run_grid.addLayout(seed_row, 1, 1, 1, 4)

        for spin in (self.batch_spin, self.steps_spin, self.spe_spin, self.epochs_spin,
                     self.seed_spin, self.checkpoint_spin, self.per_call_spin):
            spin.setMinimumWidth(120)
        self.lr_edit.setMinimumWidth(120)

        self.errors = error_label()
        grid = QGridLayout()
        grid.setHorizontalSpacing(14)
        grid.setVerticalSpacing(10)
        grid.addWidget(run, 0, 0, 1, 2)
        grid.addWidget(numerics, 1, 0)
        grid.addWidget(length, 1, 1)
        self.optimizer_box = OptimizerBox(self.lr_edit)
        self.optimizer_box.changed.connect(self._on_change)
        grid.addWidget(self.optimizer_box, 2, 0, 1, 2)
        grid.setColumnStretch(0, 1)
        grid.setColumnStretch(1, 1)
        # A user's own training script (chosen on the next page, or remembered) gets these
        # options only as DTGUI_* variables: dtgui cannot impose them on it.
        self.script_note = muted(SCRIPT_OPTIONS_NOTE)
        self.script_note.setObjectName("scriptOptionsNote")
        self.script_note.setVisible(False)
        content = QWidget()
        inner = QVBoxLayout(content)
        inner.setContentsMargins(0, 0, 0, 0)
        inner.addWidget(self.script_note)
        inner.addLayout(grid)
        inner.addStretch(1)
        # Scrolls where the screen is lower than the page (1366x768): the wizard always fits.
        scroll = QScrollArea()
        scroll.setObjectName("optionsScroll")
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(content)
        layout = QVBoxLayout(self)
        layout.addWidget(scroll, 1)
        layout.addWidget(self.errors)

        plan = ctx.initial
        self.run_name_edit.setText(
            plan.run_name if plan is not None else fresh_run_name(ctx.recommendation.strategy))
        self._sync_epochs()

        for combo in (self.precision_combo, self.communication_combo, self.compression_combo):
            combo.currentIndexChanged.connect(lambda *_: self._on_change())
        self.pack_spin.valueChanged.connect(lambda *_: self._on_change())
        for check in (self.xla_check, self.deterministic_check):
            check.toggled.connect(lambda *_: self._on_change())
        for spin in (self.batch_spin, self.seed_spin, self.checkpoint_spin, self.per_call_spin):
            spin.valueChanged.connect(lambda *_: self._on_change())
        self.steps_spin.valueChanged.connect(self._on_length)
        self.spe_spin.valueChanged.connect(self._on_length)
        self.epochs_spin.valueChanged.connect(self._on_epochs)
        self.lr_edit.textChanged.connect(lambda *_: self._on_change())
        self.run_name_edit.textChanged.connect(lambda *_: self._on_change())
        self.new_name_button.clicked.connect(self._new_name)

    # -- the plan ----------------------------------------------------------------------
    def learning_rate(self) -> float:
        try:
            value = float(self.lr_edit.text().strip().replace(",", "."))
        except ValueError:
            return math.nan
        return value if math.isfinite(value) else math.nan

    def apply(self, plan: Plan) -> Plan:
        return self.optimizer_box.apply(plan).with_changes(
            precision=Precision(self.precision_combo.currentData()),
            xla=self.xla_check.isChecked(),
            communication=Communication(self.communication_combo.currentData()),
            grad_compression=GradCompression(self.compression_combo.currentData()),
            bytes_per_pack=self.pack_spin.value() * MIB,
            per_replica_batch=self.batch_spin.value(),
            steps=self.steps_spin.value(),
            steps_per_epoch=self.spe_spin.value(),
            learning_rate=self.learning_rate(),
            seed=self.seed_spin.value(),
            deterministic=self.deterministic_check.isChecked(),
            checkpoint_every=self.checkpoint_spin.value(),
            steps_per_call=self.per_call_spin.value(),
            run_name=self.run_name_edit.text().strip(),
        )

    def load(self, plan: Plan) -> None:
        """Pre-fill from a plan (the last run's settings)."""
        for combo, value in ((self.precision_combo, plan.precision),
                             (self.communication_combo, plan.communication),
                             (self.compression_combo, plan.grad_compression)):
            index = combo.findData(str(value))
            if index >= 0:
                combo.setCurrentIndex(index)
        self.xla_check.setChecked(bool(plan.xla))
        self.pack_spin.setValue(min(2047, -(-as_int(plan.bytes_per_pack, 0) // MIB)))
        self.batch_spin.setValue(as_int(plan.per_replica_batch, 32))
        self.steps_spin.setValue(as_int(plan.steps, 100))
        self.spe_spin.setValue(as_int(plan.steps_per_epoch, 25))
        self.lr_edit.setText(f"{as_float(plan.learning_rate, 0.001):g}")
        self.seed_spin.setValue(as_int(plan.seed, 42))
        self.deterministic_check.setChecked(bool(plan.deterministic))
        self.checkpoint_spin.setValue(as_int(plan.checkpoint_every, 50))
        self.per_call_spin.setValue(as_int(plan.steps_per_call, 0))
        self.optimizer_box.load(plan)
        self.run_name_edit.setText(str(plan.run_name))
        self._sync_epochs()

    def errors_now(self) -> list[str]:
        """What is wrong with pages 1-2 (the model is page 3's business)."""
        return validate(self.ctx.draft(upto=self), usable_gpus=self.ctx.usable_gpus)

    def isComplete(self) -> bool:
        return not self.errors_now()

    def initializePage(self) -> None:
        if AUTO_NAME.fullmatch(self.run_name_edit.text().strip()):
            # a generated name (the last run's, or made for another strategy): a fresh one
            # for this strategy and time; a name the person typed is kept
            self._new_name()
        script = self.ctx.draft().script is not None
        self.script_note.setVisible(script)
        self.optimizer_box.setEnabled(not script)
        self.optimizer_box.setToolTip("Your training script builds its own optimizer." if script
                                      else "")
        self._on_change()

    # -- reacting to the user ----------------------------------------------------------
    def _new_name(self) -> None:
        self.run_name_edit.setText(fresh_run_name(self.ctx.draft(upto=self).strategy))

    def _on_length(self) -> None:
        self._sync_epochs()
        self._on_change()

    def _on_epochs(self, epochs: float) -> None:
        self.steps_spin.blockSignals(True)
        self.steps_spin.setValue(max(1, round(epochs * self.spe_spin.value())))
        self.steps_spin.blockSignals(False)
        self._on_change()

    def _offer_levers(self, plan: Plan) -> None:
        """The all-reduce's levers are offered where the all-reduce crosses machines (a choice
        that became invalid stays visible, and refused, until changed)."""
        reason = (SCRIPT_LEVERS if plan.script is not None
                  else plan.strategy.no_levers_reason()
                  or ("" if plan.strategy.packs_all_reduce else ONE_MACHINE_LEVERS))
        compress_set = self.compression_combo.currentData() != "none"
        self.compression_combo.setEnabled(not reason or compress_set)
        self.compression_combo.setToolTip(reason or LEVERS_HELP)
        self.pack_spin.setEnabled(not reason or self.pack_spin.value() > 0)
        self.pack_spin.setToolTip(reason or LEVERS_HELP)

    def _sync_epochs(self) -> None:
        self.epochs_spin.blockSignals(True)
        self.epochs_spin.setValue(self.steps_spin.value() / self.spe_spin.value())
        self.epochs_spin.blockSignals(False)

    def _on_change(self) -> None:
        plan = self.ctx.draft(upto=self)
        info = STRATEGIES[plan.strategy]
        gpu = plan.device_kind == "gpu"
        tpu = plan.strategy.uses_tpu

        set_item_enabled(self.precision_combo, PRECISIONS.index("mixed_float16"), not tpu,
                         "TPUs use bfloat16: choose mixed_bfloat16." if tpu else "")
        self.precision_hint.setText(precision_hint(plan, self.ctx.facts))

        # A choice that became invalid stays visible (and refused below) until changed.
        xla_ok = info.supports_xla
        self.xla_check.setEnabled(xla_ok or self.xla_check.isChecked())
        self.xla_check.setToolTip("" if xla_ok else
                                  f"XLA is not supported with {info.title} in dtgui.")
        comm_ok = info.supports_communication
        self.communication_combo.setEnabled(
            comm_ok or self.communication_combo.currentData() != "auto")
        self.communication_combo.setToolTip(
            "How gradients are all-reduced between replicas." if comm_ok else
            f"{info.title} has no collective communication option: it uses auto.")
        set_item_enabled(self.communication_combo, COMMUNICATIONS.index("nccl"), gpu and comm_ok,
                         "" if gpu else "NCCL needs GPUs: choose auto or ring on CPU.")

        self._offer_levers(plan)

        if plan.strategy is not self._strategy_seen:
            self._strategy_seen = plan.strategy
            if plan.strategy.asynchronous:
                self.deterministic_check.setChecked(False)
        self.deterministic_check.setToolTip(ASYNCHRONOUS_NOT_REPRODUCIBLE.format(info.title)
                                            if plan.strategy.asynchronous else "")

        self.global_label.setText(global_batch_text(plan))
        self.optimizer_box.set_effective_batch(plan.global_batch)
        if isinstance(self.ctx.draft().model, DemoModel) and not tpu:
            per_epoch = max(1, round(DIGITS_EXAMPLES / max(1, plan.global_batch)))
            # the model is chosen on the next page: say which one this assumes
            pass_text = (f"With the demo model (the next page chooses the model): "
                         f"{DIGITS_EXAMPLES} examples, about {per_epoch} steps at this batch")
            # an epoch is the steps per epoch set above; offer the pass's length beside it
            self.epoch_hint.setText(
                f"{pass_text}, one epoch." if plan.steps_per_epoch == per_epoch
                else f"{pass_text} (<a href='{per_epoch}'>use {per_epoch}</a>).")
        else:
            self.epoch_hint.setText("")
        self.epoch_hint.setVisible(bool(self.epoch_hint.text()))
        errors = self.errors_now()
        show_errors(self.errors, errors)
        for prefix, field in (("Run name", self.run_name_edit), ("Learning rate", self.lr_edit)):
            mark_invalid(field, any(e.startswith(prefix) for e in errors))
        self.completeChanged.emit()
