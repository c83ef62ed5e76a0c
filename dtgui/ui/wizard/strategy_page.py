"""Page 1: the tf.distribute strategy, the devices, and how many replicas and processes."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QButtonGroup,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLineEdit,
    QRadioButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
    QWizardPage,
)

from dtgui.core.plans.placement import task_layout
from dtgui.core.plans.plan import MAX_REPLICAS, DeviceKind, Plan, validate
from dtgui.core.plans.strategies import STRATEGIES, Strategy

from .common import (
    MULTI_TASK,
    WizardContext,
    as_int,
    card,
    error_label,
    form_layout,
    label,
    mark_invalid,
    monospace,
    muted,
    show_errors,
)
from .strategy_list import API, GOOD_FOR, UPDATES, StrategyList
from .texts import fixed_replicas_reason


class StrategyPage(QWizardPage):
    def __init__(self, ctx: WizardContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.setTitle("Distribution strategy")
        self.setSubTitle("How training is spread over devices and processes. The recommendation "
                         "comes from what was detected on this machine.")
        rec = ctx.recommendation
        self._replicas_wanted = max(1, rec.replicas)

        self.strategy_list = StrategyList(rec.strategy)
        self.strategy_list.setFixedWidth(250)

        self.title_label = label()
        self.title_label.setStyleSheet("font-size: 13pt; font-weight: bold;")
        self.summary_label = label()
        self.api_label = label(selectable=True)
        self.api_label.setFont(monospace())
        self.updates_label = label()
        self.good_for_label = label()
        facts_grid = QGridLayout()
        facts_grid.setHorizontalSpacing(10)
        facts_grid.setVerticalSpacing(4)
        for row, (name, value) in enumerate((("API", self.api_label),
                                              ("Updates", self.updates_label),
                                              ("Good for", self.good_for_label))):
            key = muted(name + ":")
            key.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
            facts_grid.addWidget(key, row, 0)
            facts_grid.addWidget(value, row, 1)
        facts_grid.setColumnStretch(1, 1)
        self.recommend_label = label()
        self.recommend_label.setObjectName("recommendation")
        self.recommend_label.setStyleSheet(
            "QLabel#recommendation { background: #eff6ff; border: 1px solid #bfdbfe;"
            " border-radius: 4px; padding: 6px 8px; color: #1e3a8a; }")
        detail = card()
        detail_box = QVBoxLayout(detail)
        detail_box.setContentsMargins(14, 10, 14, 12)
        detail_box.setSpacing(6)
        detail_box.addWidget(self.title_label)
        detail_box.addWidget(self.summary_label)
        detail_box.addSpacing(4)
        detail_box.addLayout(facts_grid)
        detail_box.addStretch(1)

        # Devices
        gpus = ctx.gpu_count
        cores = ctx.facts.cpu_cores
        self.cpu_radio = QRadioButton(f"CPU — {cores} core{'s' if cores != 1 else ''}")
        self.gpu_radio = QRadioButton(self._gpu_text())
        self.device_group = QButtonGroup(self)
        self.device_group.addButton(self.cpu_radio)
        self.device_group.addButton(self.gpu_radio)
        self.cpu_radio.setChecked(True)
        if not gpus:
            self.gpu_radio.setEnabled(False)
            self.gpu_radio.setToolTip(ctx.gpu_unavailable_reason())
        self.device_note = muted()
        device_row = QHBoxLayout()
        device_row.addWidget(self.cpu_radio)
        device_row.addSpacing(24)
        device_row.addWidget(self.gpu_radio)
        device_row.addStretch(1)

        # Replicas and processes
        self.replicas_spin = QSpinBox()
        self.replicas_spin.setRange(1, MAX_REPLICAS)
        self.replicas_spin.setValue(self._replicas_wanted)
        self.replicas_note = muted()
        self.workers_spin = QSpinBox()
        self.workers_spin.setRange(1, 64)
        self.workers_spin.setValue(2)
        self.workers_spin.setToolTip("Worker processes; the review page chooses the machine "
                                     "each one runs on (this machine by default).")
        self.ps_spin = QSpinBox()
        self.ps_spin.setRange(1, 16)
        self.ps_spin.setValue(1)
        self.ps_spin.setToolTip("Parameter-server processes that hold the variables.")
        self.tpu_edit = QLineEdit()
        self.tpu_edit.setPlaceholderText("grpc://10.0.0.2:8470, a TPU name, or 'local' on a TPU VM")
        self.tpu_edit.setMaxLength(300)
        for spin in (self.replicas_spin, self.workers_spin, self.ps_spin):
            spin.setMinimumWidth(90)
        replicas_row = QHBoxLayout()
        replicas_row.addWidget(self.replicas_spin)
        replicas_row.addSpacing(8)
        replicas_row.addWidget(self.replicas_note, 1)
        self.form = form_layout()
        self.form.addRow("Device:", device_row)
        self.form.addRow("", self.device_note)
        self.form.addRow("Replicas per task:", replicas_row)
        self.form.addRow("Workers:", self.workers_spin)
        self.form.addRow("Parameter servers:", self.ps_spin)
        self.form.addRow("TPU address:", self.tpu_edit)
        self.processes_label = muted()
        self.processes_label.setObjectName("processes")
        setup = QGroupBox("Devices and processes")
        setup_box = QVBoxLayout(setup)
        setup_box.addLayout(self.form)
        setup_box.addWidget(self.processes_label)

        self.errors = error_label()

        right = QVBoxLayout()
        right.addWidget(detail, 1)
        right.addWidget(setup)
        top = QHBoxLayout()
        top.addWidget(self.strategy_list)
        top.addSpacing(6)
        top.addLayout(right, 1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.recommend_label)
        layout.addLayout(top, 1)
        layout.addWidget(self.errors)

        self.strategy_list.currentItemChanged.connect(lambda *_: self._on_change())
        self.device_group.buttonToggled.connect(lambda *_: self._on_change())
        for spin in (self.replicas_spin, self.workers_spin, self.ps_spin):
            spin.valueChanged.connect(self._on_spin)
        self.tpu_edit.textChanged.connect(lambda *_: self._on_change())
        self.select_strategy(rec.strategy)

    # -- the plan ----------------------------------------------------------------------
    def strategy(self) -> Strategy:
        return Strategy.named(self.strategy_list.key()) or self.ctx.recommendation.strategy

    def select_strategy(self, key: str) -> None:
        self.strategy_list.select(key)

    def device_kind(self) -> DeviceKind:
        return (DeviceKind.GPU if self.gpu_radio.isChecked() and not self.strategy().uses_tpu
                else DeviceKind.CPU)

    def apply(self, plan: Plan) -> Plan:
        strategy = self.strategy()
        return plan.with_changes(
            strategy=strategy,
            device_kind=self.device_kind(),
            replicas_per_task=self.replicas_spin.value(),
            workers=self.workers_spin.value() if strategy.multi_process else 1,
            parameter_servers=self.ps_spin.value() if "ps" in strategy.task_types else 0,
            tpu_address=self.tpu_edit.text().strip() if strategy.uses_tpu else "",
        )

    def load(self, plan: Plan) -> None:
        """Pre-fill from a plan (the last run's settings)."""
        if plan.strategy in STRATEGIES:
            self.select_strategy(plan.strategy)
        if plan.device_kind == "gpu" and self.gpu_radio.isEnabled():
            self.gpu_radio.setChecked(True)
        elif plan.device_kind == "gpu":
            self.cpu_radio.setChecked(True)
            self.device_note.setText("The last run trained on GPUs, but none is usable here: "
                                     "CPU is selected instead.")
        else:
            self.cpu_radio.setChecked(True)
        if plan.strategy in MULTI_TASK:
            self.workers_spin.setValue(as_int(plan.workers, 2))
        if plan.strategy in STRATEGIES and "ps" in plan.strategy.task_types:
            self.ps_spin.setValue(as_int(plan.parameter_servers, 1))
        self.tpu_edit.setText(str(plan.tpu_address or ""))
        replicas = as_int(plan.replicas_per_task, 1)
        if self.replicas_spin.isEnabled():
            self.replicas_spin.setValue(replicas)
        elif replicas > 1:
            self._replicas_wanted = min(replicas, MAX_REPLICAS)
        self._on_change()

    def errors_now(self) -> list[str]:
        plan = self.apply(Plan())
        return validate(plan, usable_gpus=self.ctx.usable_gpus)

    def isComplete(self) -> bool:
        return not self.errors_now()

    # -- reacting to the user ----------------------------------------------------------
    def _on_spin(self) -> None:
        if self.replicas_spin.isEnabled():
            self._replicas_wanted = self.replicas_spin.value()
        self._on_change()

    def _on_change(self) -> None:
        strategy = self.strategy()
        info = STRATEGIES[strategy]
        self.title_label.setText(info.title)
        self.summary_label.setText(info.summary)
        self.api_label.setText(API.get(strategy, ""))
        self.updates_label.setText(UPDATES.get(strategy, ""))
        self.good_for_label.setText(GOOD_FOR.get(strategy, ""))
        rec = self.ctx.recommendation
        if strategy == rec.strategy:
            self.recommend_label.setText(f"★ Recommended for this machine. {rec.reason}")
        else:
            self.recommend_label.setText(
                f"★ Recommended here: {STRATEGIES[rec.strategy].title}. {rec.reason}")

        tpu = strategy.uses_tpu
        self.cpu_radio.setEnabled(not tpu)
        self.gpu_radio.setEnabled(not tpu and self.ctx.gpu_count > 0)
        self.cpu_radio.setToolTip("Not used by the TPU strategy." if tpu else "")
        if tpu:
            self.gpu_radio.setToolTip("Not used by the TPU strategy.")
        elif not self.ctx.gpu_count:
            self.gpu_radio.setToolTip(self.ctx.gpu_unavailable_reason())
        else:
            self.gpu_radio.setToolTip("")
        if tpu:
            self.device_note.setText("The TPU strategy runs on the TPU's cores: the device "
                                     "choice does not apply.")
        elif not self.device_note.text().startswith("The last run"):
            self.device_note.setText(self._device_hint())

        device = self.device_kind()
        reason = fixed_replicas_reason(strategy, device)
        self.replicas_spin.blockSignals(True)
        if device == "gpu" and not strategy.one_gpu_per_task and not strategy.uses_tpu:
            self.replicas_spin.setMaximum(max(1, self.ctx.gpu_count))
        else:
            self.replicas_spin.setMaximum(MAX_REPLICAS)
        if reason:
            self.replicas_spin.setValue(1)
            self.replicas_spin.setEnabled(False)
        else:
            self.replicas_spin.setEnabled(True)
            self.replicas_spin.setValue(min(self._replicas_wanted, self.replicas_spin.maximum()))
        self.replicas_spin.blockSignals(False)
        self.replicas_spin.setToolTip(reason or (
            "GPUs each task trains on." if device == "gpu" else
            "Logical CPU devices each task splits the CPU into; one replica on each."))
        self.replicas_note.setText(reason or (
            f"at most {self.ctx.gpu_count} (the usable GPUs)" if device == "gpu" else
            "logical CPU devices, one replica each"))

        self.form.setRowVisible(self.workers_spin, strategy.multi_process)
        self.form.setRowVisible(self.ps_spin, "ps" in strategy.task_types)
        self.form.setRowVisible(self.tpu_edit, tpu)
        self.processes_label.setText(self._processes_text())
        errors = self.errors_now()
        show_errors(self.errors, errors)
        mark_invalid(self.tpu_edit, tpu and any(e.startswith("TPU") for e in errors))
        self.completeChanged.emit()

    def _gpu_text(self) -> str:
        here = self.ctx.facts.usable_gpu_count
        text = f"GPU — {here} usable by TensorFlow" if here else "GPU — none usable by TensorFlow"
        if self.ctx.remote_gpus:
            text += " here" + ("; " if here else ", ") + ", ".join(
                f"{n} on {name}" for name, n in self.ctx.remote_gpus.items())
        return text

    def refresh_devices(self) -> None:
        """The GPUs of the registered machines became known."""
        self.gpu_radio.setText(self._gpu_text())
        initial = self.ctx.initial
        if initial is not None and initial.device_kind == "gpu" and self.ctx.gpu_count \
                and self.device_note.text().startswith("The last run"):
            self.device_note.setText("")
            self.gpu_radio.setEnabled(True)
            self.gpu_radio.setChecked(True)
        self._on_change()

    def _device_hint(self) -> str:
        if self.gpu_radio.isChecked() and not self.ctx.facts.usable_gpu_count:
            return ("No GPU is usable here: in the review, place the tasks on the machines "
                    "with GPUs.")
        if self.gpu_radio.isChecked():
            return "Each replica trains on its own GPU."
        if self.ctx.gpu_count:
            return "Train on the CPU even though GPUs are available (CUDA is hidden from it)."
        return "No GPU is usable here: replicas run side by side on logical CPU devices."

    def _processes_text(self) -> str:
        plan = self.apply(Plan())
        layout = task_layout(plan)
        names = ", ".join(f"{kind}:{index}" for kind, index in layout)
        count = len(layout)
        where = ("placed on machines in the review" if self.ctx.machine_names
                 else "on this machine")
        procs = f"{count} process{'es' if count > 1 else ''} {where} ({names})"
        replicas = plan.total_replicas
        if plan.strategy.uses_tpu:
            return f"Starts {procs}; the TPU runs one replica per core."
        return f"Starts {procs} training {replicas} replica{'s' if replicas > 1 else ''} in total."
