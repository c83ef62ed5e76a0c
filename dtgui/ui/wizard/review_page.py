"""Page 4: the placed plan, every task's TF_CONFIG and script, and port warnings; for a target
whose box makes a job (`dtgui.ui.wizard.target_box`, e.g. a Slurm cluster), what the box says
of it: the job's layout and the file that is submitted (a Slurm job's batch script, the one
that goes into the bundle)."""

from __future__ import annotations

import html
import json
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QFontMetrics, QTextOption
from PySide6.QtWidgets import (
    QCheckBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
    QWizardPage,
)

from dtgui.core.bundles.bundle import task_script_text
from dtgui.core.measure.all_reduce_levers import plan_forecast
from dtgui.core.measure.network_pairs import LINKS_FILE, LinkTest, load_links
from dtgui.core.plans.placement import (
    PlacementError,
    local_port_conflicts,
    place_local,
    placed_tf_config,
)
from dtgui.core.plans.plan import LOCAL_MACHINE, ModelFile, Plan, ScriptModel, TaskSpec, validate
from dtgui.core.plans.plan_text import (
    SCRIPT_OWN,
    all_reduce_text,
    optimizer_text,
    schedule_text,
    script_rows,
    validation_text,
)
from dtgui.core.plans.strategies import STRATEGIES
from dtgui.core.settings import data_dir
from dtgui.core.target_job import TargetJob
from dtgui.ui.workers import run_in_thread

from .common import WizardContext, card, error_label, label, monospace, muted, show_errors
from .machines_box import MachinesBox
from .script_box import script_title, script_tooltip
from .strategy_list import ROLE_TAGLINE, TwoLineDelegate

_ROLE_INDEX = Qt.ItemDataRole.UserRole
_TAB_STYLE = """
QTabWidget::pane { border: 1px solid #c5ccd6; top: -1px; background: #ffffff; }
QTabBar::tab { background: #eef0f3; border: 1px solid #c5ccd6; border-bottom: none;
               padding: 5px 14px; margin-right: 2px;
               border-top-left-radius: 4px; border-top-right-radius: 4px; }
QTabBar::tab:selected { background: #ffffff; font-weight: bold; }
QTabBar::tab:!selected { margin-top: 2px; }
"""
_ROLES = {"chief": "coordinator", "worker": "worker", "ps": "parameter server"}


ELIDED_LEAST_PX = 170  # a long value never makes the review wider than this


class ReviewPage(QWizardPage):
    def __init__(self, ctx: WizardContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.setTitle("Review")
        self.setSubTitle("Exactly what will run: every process, its TF_CONFIG and the script "
                         "that starts it. Launch it here, or export it as a bundle.")
        self.setFinalPage(True)
        self._plan: Plan | None = None
        self.placement_error = ""  # why the tasks cannot go on the chosen machines (GPUs)
        # the job the chosen target's box made (e.g. a Slurm job; the placed plan's), for its
        # driver's `target_of_job`; None: the plan's own machines
        self.job: TargetJob | None = None
        self.job_problems: list[str] = []  # why that job cannot be sent as typed
        self.machine_problems: dict[str, str] = {}  # machine -> why Machines marks it ✗

        self.summary = card()
        self.summary_grid = QGridLayout(self.summary)
        self.summary_grid.setContentsMargins(14, 10, 14, 10)
        self.summary_grid.setHorizontalSpacing(10)
        self.summary_grid.setVerticalSpacing(4)
        self.summary_values: dict[str, QLabel] = {}
        names = ("Strategy", "Devices", "Replicas", "Global batch", "Precision", "XLA",
                 "Steps", "Learning rate", "Seed", "Optimizer", "Validation", "Model",
                 "Checkpoints", "All-reduce", "Run name")
        for i, name in enumerate(names):
            # the run name (its strategy and time: long) has a row of its own, first
            row, col = (0, 0) if name == "Run name" else divmod(i + 3, 3)
            key = QLabel(name + ":")
            key.setStyleSheet("color: #6b7280;")
            key.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            value = label(wrap=False, selectable=True)
            value.setStyleSheet("font-weight: bold;")
            self.summary_values[name] = value
            self.summary_grid.addWidget(key, row, col * 2)
            self.summary_grid.addWidget(value, row, col * 2 + 1, 1, 5 if name == "Run name" else 1)
        for col in (1, 3, 5):
            self.summary_grid.setColumnStretch(col, 1)
        # values that may be long are shortened to the room their column has, not more
        self._full_texts: dict[QLabel, str] = {}
        for name in ("All-reduce", "Optimizer", "Model", "Run name"):
            value = self.summary_values[name]
            value.setMinimumWidth(ELIDED_LEAST_PX)
            value.setSizePolicy(QSizePolicy.Policy.Ignored, value.sizePolicy().verticalPolicy())
            value.installEventFilter(self)
        # a user's own script: what runs, what it is given, what of dtgui's does not apply
        self.script_info = label(name="scriptReview", selectable=True)
        self.script_info.setTextFormat(Qt.TextFormat.RichText)
        self.script_info.setVisible(False)
        self.summary_grid.addWidget(self.script_info, len(names) // 3 + 1, 0, 1, 6)

        self.task_list = QListWidget()
        self.task_list.setObjectName("taskList")
        self.task_list.setMinimumWidth(250)
        self.task_list.setItemDelegate(TwoLineDelegate(self.task_list))
        self.replan_button = QPushButton("Re-plan ports")
        self.replan_button.setToolTip("Choose new free ports for every task.")
        left = QWidget()
        left_box = QVBoxLayout(left)
        left_box.setContentsMargins(0, 0, 0, 0)
        left_box.addWidget(label("Processes"))
        left_box.addWidget(self.task_list, 1)
        left_box.addWidget(self.replan_button)

        self.tf_config_view = QPlainTextEdit()
        self.script_view = QPlainTextEdit()
        for view in (self.tf_config_view, self.script_view):
            view.setReadOnly(True)
            view.setFont(monospace())
        self.tf_config_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        # The script wraps, so its long TF_CONFIG line is visible without scrolling.
        self.script_view.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.tabs = QTabWidget()
        self.tabs.setStyleSheet(_TAB_STYLE)  # (Fusion's unselected tab clips the "_")
        self.tabs.addTab(self.tf_config_view, "TF_CONFIG")
        self.tabs.addTab(self.script_view, "Script")
        self.batch_view = QPlainTextEdit()  # the file a box's job submits
        self.batch_view.setObjectName("batchScript")
        self.batch_view.setReadOnly(True)
        self.batch_view.setFont(monospace())
        self.batch_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.tabs.addTab(self.batch_view, "")
        self.tabs.setTabVisible(2, False)

        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(left)
        splitter.addWidget(self.tabs)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([260, 600])
        splitter.setChildrenCollapsible(False)

        self.warnings = error_label()
        self.warnings.setObjectName("warnings")
        self.note = muted()
        # the step predicted on the doctor's measured links, and the levers when the
        # all-reduce dominates
        self.forecast = muted()
        self.forecast.setObjectName("stepForecast")
        self.forecast.setVisible(False)
        self._links: list[LinkTest] = []

        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        self.machines_box = MachinesBox()  # which machine runs each task
        if ctx.facts_given:  # this machine's GPUs (NVML) until the wizard is given all facts
            self.machines_box.set_gpu_facts({LOCAL_MACHINE: ctx.facts.gpus})
        self.machines_box.changed.connect(self.replan)
        layout.addWidget(self.machines_box)
        layout.addWidget(splitter, 1)
        bottom = QHBoxLayout()
        bottom.addWidget(self.note, 1)
        self.when_free = QCheckBox("Launch when free")  # queued: `dtgui.launch.queue.run_queue`
        self.when_free.setObjectName("launchWhenFree")
        self.when_free.setToolTip(
            "If its GPUs or machines are busy (another process, a run, a sweep's trial), the "
            "run waits in the queue on the Runs page and starts when they are free, also "
            "while dtgui is closed.")
        self.when_free.toggled.connect(self.machines_box.gpus.set_wait_for_busy)
        bottom.addWidget(self.when_free)
        layout.addLayout(bottom)
        layout.addWidget(self.forecast)
        layout.addWidget(self.warnings)

        self.task_list.currentRowChanged.connect(self._show_task)
        self.replan_button.clicked.connect(self.replan)

    # -- the plan ----------------------------------------------------------------------
    def placed_plan(self) -> Plan:
        if self._plan is None:
            self._plan = self._place(self.ctx.draft())
        return self._plan

    def _place(self, draft: Plan) -> Plan:
        """On the chosen machines when any is remote, else on this machine.

        When the chosen GPUs do not suffice, `placement_error` says why (the page cannot be
        completed) and the tasks are shown on their machines without GPUs."""
        self.machines_box.set_plan(draft)
        self.placement_error = ""
        self.job, self.job_problems = None, []
        box = self.machines_box.target_box()
        if box is not None:  # the job's tasks, as the launch places them
            placed, self.job, self.job_problems = box.review(draft)
            return placed
        if self.machines_box.is_remote():
            try:
                return self.machines_box.preview(draft)
            except PlacementError as exc:
                self.placement_error = str(exc)
            try:
                return self.machines_box.preview(draft, with_gpus=False)
            except PlacementError:
                pass
        return place_local(draft)

    def initializePage(self) -> None:
        self.replan()
        run_in_thread(lambda: load_links(data_dir() / LINKS_FILE), self._links_loaded,
                      context=self)

    def _links_loaded(self, links: list[LinkTest]) -> None:
        self._links = links
        self._show_forecast(self.placed_plan())

    def _show_forecast(self, plan: Plan) -> None:
        gradient_bytes, compute = 0, 0.0
        checked = self.ctx.model_check
        model = plan.model_file
        if model is not None and checked is not None and checked[1].ok \
                and Path(checked[0]).resolve() == Path(model.path).resolve():
            gradient_bytes, compute = checked[1].gradient_bytes, checked[1].step_seconds
        text = plan_forecast(plan, self._links, gradient_bytes, compute)
        self.forecast.setText(text)
        self.forecast.setVisible(bool(text))

    def replan(self) -> None:
        """Place the tasks again with free ports and show the result."""
        row = max(0, self.task_list.currentRow())
        self._plan = self._place(self.ctx.draft())
        self._refresh(row)

    def problems(self) -> list[str]:
        plan = self.placed_plan()
        if self.job is not None:  # the job's GPUs and ports are its kind's to give
            return self.job_problems + validate(plan, usable_gpus=None)
        placement = [self.placement_error] if self.placement_error else []
        gpus = self.ctx.usable_gpus_for(plan)
        busy = local_port_conflicts(plan)
        if busy:  # the page's own way to choose other ports
            busy.append("Press Re-plan ports to choose free ones.")
        return placement + validate(plan, usable_gpus=gpus) + busy

    def isComplete(self) -> bool:
        if self._plan is not None and self.job is not None:
            return not self.job_problems and not validate(self._plan, usable_gpus=None)
        return self._plan is not None and not self.placement_error and not validate(
            self._plan, usable_gpus=self.ctx.usable_gpus_for(self._plan))

    # -- showing it --------------------------------------------------------------------
    def _refresh(self, row: int) -> None:
        plan = self.placed_plan()
        info = STRATEGIES[plan.strategy]
        values = self.summary_values
        values["Strategy"].setText(info.title)
        tpu = info.uses_tpu
        values["Devices"].setText("TPU" if tpu else plan.device_kind.upper())
        values["Replicas"].setText("one per TPU core" if tpu else str(plan.total_replicas))
        values["Global batch"].setText(
            f"{plan.per_replica_batch} × cores" if tpu
            else str(plan.global_batch))
        values["Precision"].setText(str(plan.precision))
        self._set_elided(values["All-reduce"], all_reduce_text(plan) or (
            "float32" if plan.strategy.all_reduces_gradients and plan.total_replicas > 1
            else "none"))
        values["XLA"].setText("on" if plan.xla else "off")
        per_call = f", {plan.steps_per_call} per call" if plan.steps_per_call else ""
        values["Steps"].setText(f"{plan.steps} ({plan.steps_per_epoch} per epoch{per_call})")
        values["Learning rate"].setText(schedule_text(plan))
        self._set_elided(values["Optimizer"], optimizer_text(plan))
        values["Validation"].setText(validation_text(plan))
        values["Seed"].setText(f"{plan.seed}" + (", deterministic" if plan.deterministic else ""))
        model = plan.model
        if isinstance(model, ScriptModel):  # a user's own training script
            self._set_elided(values["Model"], script_title(model), script_tooltip(model))
        elif isinstance(model, ModelFile):
            self._set_elided(values["Model"], Path(model.path).name, model.path)
        else:
            self._set_elided(values["Model"], "digits demo", "")
        values["Checkpoints"].setText(f"every {plan.checkpoint_every} steps"
                                      if plan.checkpoint_every else "off")
        self._set_elided(values["Run name"], plan.run_name)
        self._show_script(plan)

        self.task_list.blockSignals(True)
        self.task_list.clear()
        job, box = self.job, self.machines_box.target_box()
        for i, task in enumerate(plan.tasks):
            where = task.address if task.port else "this machine, no TF_CONFIG"
            if not task.is_local:
                where = f"{task.machine} · " + (task.address if task.port else "no TF_CONFIG")
            if job is not None and box is not None:
                where = box.task_where(job, i)
            item = QListWidgetItem(task.task_id)
            item.setData(ROLE_TAGLINE, f"{_ROLES.get(task.type, task.type)} · {where}")
            item.setToolTip(f"{_ROLES.get(task.type, task.type)}: tasks/{task.file_stem}.sh")
            item.setData(_ROLE_INDEX, i)
            self.task_list.addItem(item)
        self.task_list.blockSignals(False)
        self.task_list.setCurrentRow(min(row, len(plan.tasks) - 1))
        self._show_task(self.task_list.currentRow())

        count = len(plan.tasks)
        self.replan_button.setEnabled(bool(plan.cluster) and job is None)
        self.replan_button.setToolTip(
            "Ports are chosen on the nodes when the job starts." if job is not None
            else "Choose new free ports for every task." if plan.cluster
            else "A single-process strategy uses no ports.")
        self._show_job_file(plan)
        self._show_forecast(plan)
        if job is not None and box is not None:
            self.note.setText(box.note(plan, job))
        elif plan.machines:
            self.note.setText(f"{count} process(es) on {len(plan.machine_names)} machine(s). "
                              "Select a process to see its TF_CONFIG and script.")
        elif plan.cluster:
            self.note.setText(f"{count} processes on 127.0.0.1, ports chosen free just now. "
                              "Select a process to see its TF_CONFIG and script.")
        else:
            self.note.setText("One process: a single-process strategy needs no TF_CONFIG.")
        show_errors(self.warnings, self.problems() + self.marked(plan))
        self.completeChanged.emit()

    def marked(self, plan: Plan) -> list[str]:
        """A word on each machine the run uses that the Machines panel marks with a problem
        (the launch checks it again, and may yet start)."""
        return [f"{name} is marked with a problem in Machines"
                + (f" ({problem.rstrip('.')})" if problem else "")
                + "; the launch checks it again."
                for name in plan.machine_names
                if (problem := self.machine_problems.get(name)) is not None]

    def _show_job_file(self, plan: Plan) -> None:
        """The file the box's job submits (exactly what the bundle holds), or why it cannot
        be written; the tab is there only for a target whose box has one."""
        shown = self.tabs.isTabVisible(2)
        box = self.machines_box.target_box()
        name, text = box.job_file(plan, self.job, self.job_problems) \
            if box is not None and self.job is not None else ("", "")
        self.tabs.setTabVisible(2, bool(name))
        if not name:
            self.batch_view.clear()
            return
        self.tabs.setTabText(2, name)
        self.batch_view.setPlainText(text)
        if not shown:
            self.tabs.setCurrentIndex(2)

    def _show_script(self, plan: Plan) -> None:
        """A script run: dtgui's own options that do not apply say so instead of showing
        their defaults; the hints show as the variables the script gets."""
        values = self.summary_values
        rows = script_rows(plan)
        for name in ("Steps", "Learning rate", "Optimizer", "Validation", "Checkpoints",
                     "Precision", "XLA", "Global batch", "Seed", "All-reduce"):
            values[name].setStyleSheet("" if not rows else "color: #6b7280;")
        self.script_info.setVisible(bool(rows))
        if not rows:
            self.script_info.clear()
            for name in ("Steps", "Validation", "Checkpoints"):
                values[name].setToolTip("")
            return
        own = f"not used: {SCRIPT_OWN}"
        values["Steps"].setText(f"{own} (DTGUI_STEPS={plan.steps} as a hint)")
        values["Learning rate"].setText(f"hint DTGUI_LEARNING_RATE={plan.learning_rate:g}")
        values["Optimizer"].setText(own)
        values["Validation"].setText(own)
        values["Checkpoints"].setText(f"{own} (DTGUI_CHECKPOINT_DIR)")
        values["Precision"].setText(f"hint DTGUI_PRECISION={plan.precision}")
        values["XLA"].setText(f"hint DTGUI_XLA={'1' if plan.xla else '0'}")
        values["Global batch"].setText(f"hint DTGUI_GLOBAL_BATCH={plan.global_batch}")
        values["Seed"].setText(f"hint DTGUI_SEED={plan.seed}")
        values["All-reduce"].setText(f"{own} (its own all-reduce)")
        for name in ("Steps", "Optimizer", "Validation", "Checkpoints"):
            values[name].setToolTip("dtgui's own training loop is not used: your script "
                                    "trains its own way.")
        self.script_info.setText("<br>".join(
            f"<span style='color:#6b7280'>{html.escape(key)}:</span> {html.escape(value)}"
            for key, value in rows if key != "Project"))

    def _set_elided(self, widget: QLabel, text: str, tooltip: str = "") -> None:
        self._full_texts[widget] = text
        widget.setProperty("fullTip", tooltip)
        self._elide(widget)

    def _elide(self, widget: QLabel) -> None:
        text = self._full_texts.get(widget, "")
        font = widget.font()
        font.setBold(True)
        room = max(ELIDED_LEAST_PX, widget.contentsRect().width())
        shown = QFontMetrics(font).elidedText(text, Qt.TextElideMode.ElideMiddle, room)
        widget.setText(shown)
        widget.setToolTip(str(widget.property("fullTip") or "") or (text if shown != text else ""))

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Resize and watched in self._full_texts:
            assert isinstance(watched, QLabel)
            self._elide(watched)  # its column's room changed
        return super().eventFilter(watched, event)

    def _show_task(self, row: int) -> None:
        plan = self.placed_plan()
        if not 0 <= row < len(plan.tasks):
            self.tf_config_view.clear()
            self.script_view.clear()
            return
        task: TaskSpec = plan.tasks[row]
        config = placed_tf_config(plan, task)
        box = self.machines_box.target_box()
        own = box.tf_config_text(plan, self.job, row) \
            if box is not None and self.job is not None and config is not None else None
        if own is not None:
            self.tf_config_view.setPlainText(own)
        elif config is None:
            self.tf_config_view.setPlainText(
                "# Not set: a single-process strategy needs no TF_CONFIG.\n")
        else:
            self.tf_config_view.setPlainText(json.dumps(config, indent=2) + "\n")
        self.tabs.setTabText(1, f"tasks/{task.file_stem}.sh")
        self.script_view.setPlainText(task_script_text(plan, task))

