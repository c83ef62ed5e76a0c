"""The run wizard: strategy -> training options -> model and data -> review (launch or export)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from PySide6.QtCore import QSize, Signal
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget, QWizard

from dtgui.core.machines.hardware import GpuInfo, MachineFacts
from dtgui.core.machines.registry import Machine
from dtgui.core.plans.placement import place_local
from dtgui.core.plans.plan import LOCAL_MACHINE, Plan
from dtgui.core.target_job import TargetJob
from dtgui.resources import resource
from dtgui.ui.workers import run_in_thread

from .common import WizardContext
from .model_page import ModelPage
from .options_page import OptionsPage
from .review_page import ReviewPage
from .strategy_page import StrategyPage

PAGE_STRATEGY, PAGE_OPTIONS, PAGE_MODEL, PAGE_REVIEW = range(4)


class RunWizard(QWizard):
    """Builds a Plan. After accept: plan() is placed, action() is "launch" or "export".
    `sweepRequested(plan)`: the review page's Sweep… button (the placed plan to sweep)."""

    sweepRequested = Signal(object)  # Plan: the placed plan to sweep

    def __init__(self, facts: MachineFacts | None, initial: Plan | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("runWizard")
        self.setWindowTitle("New training run")
        self.setWizardStyle(QWizard.WizardStyle.ModernStyle)
        self.setOption(QWizard.WizardOption.NoBackButtonOnStartPage, True)
        self.setOption(QWizard.WizardOption.HaveCustomButton1, True)
        self.setOption(QWizard.WizardOption.HaveCustomButton2, True)
        area = (parent.screen() if parent is not None else self.screen()).availableGeometry()
        self.resize(min(960, area.width()), min(760, area.height() - 48))  # its title bar
        self.setMinimumSize(QSize(860, 620))
        icon = resource("icons", "dtgui.svg")
        if icon.is_file():
            self.setWindowIcon(QIcon(str(icon)))
            self.setPixmap(QWizard.WizardPixmap.LogoPixmap, QIcon(str(icon)).pixmap(48, 48))

        self.ctx = WizardContext(facts, initial)
        self.strategy_page = StrategyPage(self.ctx)
        self.options_page = OptionsPage(self.ctx)
        self.model_page = ModelPage(self.ctx)
        self.review_page = ReviewPage(self.ctx)
        self.ctx.parts = [self.strategy_page, self.options_page, self.model_page]
        self.setPage(PAGE_STRATEGY, self.strategy_page)
        self.setPage(PAGE_OPTIONS, self.options_page)
        self.setPage(PAGE_MODEL, self.model_page)
        self.setPage(PAGE_REVIEW, self.review_page)
        if initial is not None:
            self.load_plan(initial)

        self.setButtonText(QWizard.WizardButton.FinishButton, "Launch")
        self.setButtonText(QWizard.WizardButton.CustomButton1, "Export bundle…")
        launch = self.button(QWizard.WizardButton.FinishButton)
        launch.setObjectName("primaryButton")  # the app style sheet makes it blue
        launch.style().unpolish(launch)
        launch.style().polish(launch)
        export = self.button(QWizard.WizardButton.CustomButton1)
        export.setToolTip("Write a directory that reproduces this run without dtgui.")
        self.setButtonText(QWizard.WizardButton.CustomButton2, "Sweep…")
        self.button(QWizard.WizardButton.CustomButton2).setToolTip(
            "Train this run setup many times with some settings varied (a sweep).")
        self.customButtonClicked.connect(self._on_custom_button)
        self.currentIdChanged.connect(self._update_buttons)
        self.review_page.completeChanged.connect(self._update_buttons)
        self.review_page.machines_box.changed.connect(self._update_buttons)  # where it goes
        self.review_page.when_free.toggled.connect(self._update_buttons)  # Launch or Queue

        self._action = ""
        self._export_dir: Path | None = None
        self._result: Plan | None = None
        self._update_buttons()

    def load_plan(self, plan: Plan, job: TargetJob | None = None) -> None:
        """Fill every page from `plan`: the last run's setup, or a past run's (Clone into the
        wizard): its strategy and devices, options, model or script and its arguments, the
        machines its tasks were placed on; `job`, the job it was sent as (a kind's, read from
        its bundle by its driver), fills its kind's box."""
        self.ctx.set_initial(plan)
        self.strategy_page.load(plan)
        self.options_page.load(plan)
        self.model_page.load(plan)
        box = self.review_page.machines_box
        box.remember(plan)
        if job is not None:  # the box of the job's kind takes it
            for target in box.boxes.values():
                target.refill(job)

    # -- results -------------------------------------------------------------------------
    def plan(self) -> Plan:
        """The placed plan (tasks and cluster filled); the accepted one after exec()."""
        if self._result is not None:
            return self._result
        if self.currentId() == PAGE_REVIEW:
            return self.review_page.placed_plan()
        return place_local(self.ctx.draft())

    # -- machines ------------------------------------------------------------------------------
    def set_machines(self, machines: list[Machine]) -> None:
        """The registered machines the review page offers besides this machine."""
        self.review_page.machines_box.set_machines(machines)
        self.ctx.machine_names = [m.name for m in machines]
        self.strategy_page.refresh_devices()
        if self.currentId() == PAGE_REVIEW:
            self.review_page.replan()

    def set_gpu_facts(self, facts: dict[str, list[GpuInfo]]) -> None:
        """Machine name -> its GPUs, for the review page's GPU picker ("local" = this machine;
        when absent, this machine's GPUs come from the facts the wizard was opened with)."""
        facts = dict(facts)
        if LOCAL_MACHINE not in facts and self.ctx.facts_given:
            facts[LOCAL_MACHINE] = list(self.ctx.facts.gpus)
        self.review_page.machines_box.set_gpu_facts(facts)
        self.ctx.remote_gpus = {name: len(gpus) for name, gpus in facts.items()
                                if name != LOCAL_MACHINE and gpus}
        self.strategy_page.refresh_devices()
        if self.currentId() == PAGE_REVIEW:
            self.review_page.replan()

    def set_target_facts(self, facts: Mapping[str, object]) -> None:
        """Machine name -> what the Machines panel's probe found of its kind (a Slurm
        cluster's partitions: a job for it is checked against them)."""
        self.review_page.machines_box.set_target_facts(facts)
        if self.currentId() == PAGE_REVIEW:
            self.review_page.replan()

    def set_machine_problems(self, problems: Mapping[str, str]) -> None:
        """Machine name -> why the Machines panel marks it with a problem (its last probe's
        error): the review says so for a machine the run uses."""
        self.review_page.machine_problems = dict(problems)
        if self.currentId() == PAGE_REVIEW:
            self.review_page.replan()

    def machine_pythons(self) -> dict[str, str]:
        """Remote machine -> the Python interpreter chosen for it (launch checks it)."""
        return self.review_page.machines_box.pythons()

    def action(self) -> str:
        """"launch" or "export" once accepted; "" before."""
        return self._action

    def export_dir(self) -> Path | None:
        """Where to write the bundle (a new or empty directory) when action() is "export"."""
        return self._export_dir

    def accept(self) -> None:
        if self.currentId() != PAGE_REVIEW or not self.review_page.isComplete():
            return
        if self._action != "export":
            self._action = "launch"
        self._result = self.review_page.placed_plan()
        job, box = self.review_page.job, self.review_page.machines_box.target_box()
        if job is not None and box is not None:  # the next wizard opens with this job's fields
            run_in_thread(lambda: box.save(job), lambda _: None, lambda _exc: None)
        super().accept()

    # -- buttons -------------------------------------------------------------------------
    def _update_buttons(self, *_: object) -> None:
        last = self.currentId() == PAGE_REVIEW
        buttons = [QWizard.WizardButton.Stretch, QWizard.WizardButton.CancelButton,
                   QWizard.WizardButton.BackButton, QWizard.WizardButton.NextButton]
        if last:
            buttons += [QWizard.WizardButton.CustomButton2, QWizard.WizardButton.CustomButton1,
                        QWizard.WizardButton.FinishButton]
        else:
            buttons.append(QWizard.WizardButton.FinishButton)
        self.setButtonLayout(buttons)
        export = self.button(QWizard.WizardButton.CustomButton1)
        export.setVisible(last)
        export.setEnabled(last and self.review_page.isComplete())
        sweep = self.button(QWizard.WizardButton.CustomButton2)
        sweep.setVisible(last)
        sweep.setEnabled(last and self.review_page.isComplete())
        queue = self.review_page.when_free.isChecked()
        self.setButtonText(QWizard.WizardButton.FinishButton, "Queue" if queue else "Launch")
        self.button(QWizard.WizardButton.FinishButton).setToolTip(
            "Put the run in the queue: it starts when its GPUs and machines are free, also "
            "while dtgui is closed." if queue else self.launch_tip())

    def launch_tip(self) -> str:
        """Where Launch sends the run: this machine, the machines over SSH, or a cluster's
        queue."""
        box = self.review_page.machines_box
        own = box.target_box()
        if own is not None and own.launch_tip():
            return own.launch_tip()
        names = box.remote_names()
        if names:
            local = LOCAL_MACHINE in box.assignments().values()
            where = ", ".join((["this machine"] if local else []) + names)
            return f"Start every process on its machine ({where}, over SSH) and watch the " \
                "training."
        return "Start every process on this machine and watch the training."

    def _on_custom_button(self, which: int) -> None:
        if which == QWizard.WizardButton.CustomButton1.value:
            self.export_bundle()
        elif which == QWizard.WizardButton.CustomButton2.value:
            self.request_sweep()

    def request_sweep(self) -> None:
        """Ask for a sweep of the run set up so far; the wizard stays open until one starts."""
        if self.review_page.isComplete():
            self.sweepRequested.emit(self.review_page.placed_plan())

    def ask_export_dir(self) -> str:
        start = str(Path.home())
        return QFileDialog.getExistingDirectory(self, "Export the run bundle into", start)

    def export_bundle(self) -> None:
        """Ask a directory; accept with action "export" (the bundle goes in <dir>/<run name>
        unless the chosen directory is empty)."""
        if not self.review_page.isComplete():
            return
        chosen = self.ask_export_dir()
        if not chosen:
            return
        destination = self._bundle_destination(Path(chosen))
        if destination is None:
            return
        self._export_dir = destination
        self._action = "export"
        self.accept()

    def _bundle_destination(self, chosen: Path) -> Path | None:
        run_name = self.review_page.placed_plan().run_name
        try:
            if chosen.is_dir() and not any(chosen.iterdir()):
                return chosen
            target = chosen / run_name
            if target.exists() and (not target.is_dir() or any(target.iterdir())):
                QMessageBox.warning(
                    self, "Export bundle",
                    f"{target} already exists and is not empty. Choose another directory, or "
                    "go back and change the run name.")
                return None
        except OSError as exc:
            QMessageBox.warning(self, "Export bundle", f"{chosen} cannot be read: {exc.strerror}")
            return None
        return target
