"""The main window: this machine on the left; the home page or the live dashboard on the right."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QSize, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QIcon, QKeySequence, QResizeEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMenu,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.machines.hardware import MachineFacts
from dtgui.core.plans.plan import DeviceKind, Plan
from dtgui.core.plans.strategies import STRATEGIES, Strategy, recommend
from dtgui.core.runs.records import RunRecord
from dtgui.core.runs.run_index import SWEEP, RunRow
from dtgui.core.settings import load_last_plan, runs_dir, save_last_plan
from dtgui.core.target_job import TargetJob
from dtgui.launch.checks.model_check import cancel_all as cancel_all_checks
from dtgui.launch.runs.policy import RunPolicy
from dtgui.resources import resource
from dtgui.ui.pages.local_machine import LocalMachinePanel
from dtgui.ui.pages.run_queue_panel import RunQueuePanel
from dtgui.ui.pages.runs_page import RunsPage
from dtgui.ui.run_session import RunSession
from dtgui.ui.workers import error_message, run_in_thread

if TYPE_CHECKING:
    from dtgui.core.runs.records import RunRecord
    from dtgui.launch.runs.run_source import RunSource
    from dtgui.ui.compare import CompareView
    from dtgui.ui.dialogs.sweep_dialog import SweepDialog
    from dtgui.ui.machines.panel import MachinesPanel
    from dtgui.ui.notify import RunNotices
    from dtgui.ui.pages.dashboard import Dashboard
    from dtgui.ui.pages.sweep_view import SweepView
    from dtgui.ui.wizard import RunWizard

DEMO_STEPS = 1000


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
        layout.addWidget(card)
        layout.addWidget(hint)
        layout.addWidget(self.status)
        layout.addStretch(1)
        self.set_plan_text(demo_plan(None))

    def set_status(self, text: str, failed: bool = False) -> None:
        """The line under the demo: a launch's progress, or why it could not start."""
        self.status.setText(text)
        self.failed = failed

    def set_plan_text(self, plan: Plan) -> None:
        info = STRATEGIES[plan.strategy]
        where = "logical CPU devices" if plan.device_kind == "cpu" else "GPUs"
        self.demo_text.setText(
            f"1797 real 8×8 handwritten digits (bundled, works offline; 297 held out to "
            f"validate), a 3-layer MLP, "
            f"{plan.steps} steps with <b>{info.title}</b> over {plan.total_replicas} replica(s) "
            f"on {where}, global batch {plan.global_batch}. One loss curve per replica, live."
        )


class PagesHolder(QWidget):
    """The pages at the scroll area's size. Without a layout it has no height-for-width, so
    a page's wrapped labels do not make the scroll area give it their ideal height (taller
    than the window): it scrolls only below the pages' minimum."""

    def __init__(self, pages: QWidget) -> None:
        super().__init__()
        self.pages = pages
        pages.setParent(self)

    def minimumSizeHint(self) -> QSize:
        return self.pages.minimumSizeHint()

    def sizeHint(self) -> QSize:
        return self.pages.sizeHint()

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.LayoutRequest:  # a page's minimum changed
            self.updateGeometry()
        return super().event(event)

    def resizeEvent(self, event: QResizeEvent) -> None:
        self.pages.setGeometry(self.rect())
        super().resizeEvent(event)


class MainWindow(QMainWindow):
    def __init__(self) -> None:
        super().__init__()
        self.setWindowTitle("dtgui — distributed TensorFlow training")
        self.setWindowIcon(QIcon(str(resource("icons", "dtgui.svg"))))
        area = self.screen().availableGeometry()  # on a 1366x768 screen too
        self.resize(min(1400, area.width()), min(880, area.height()))
        self.session = RunSession(lambda: self.machines, self)
        self.wizard: RunWizard | None = None
        self._closing = False
        self._launch_machines: set[str] = set()  # the last launch's registered machines

        self.machine = LocalMachinePanel()
        self.machine.setMinimumWidth(320)
        self.machine.setMaximumWidth(460)
        self.home = HomePage()
        self.dashboard: Dashboard | None = None  # made on the first run: pyqtgraph loads then
        self.pages = QStackedWidget()
        self.pages.addWidget(self.home)
        # The left column: this machine, and under it the registered remote machines.
        # The machines panel loads paramiko and keyring (~0.4 s): it is built just after the
        # first paint (or on first use), so the window shows at once.
        self._machines: MachinesPanel | None = None
        self.machine.setMaximumWidth(16777215)  # the column's width limits both panels
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(6, 0, 0, 6)
        left_layout.addWidget(self.machine, 0)
        self._left_layout = left_layout
        left_layout.addStretch(1)
        left.setMinimumWidth(380)
        left.setMaximumWidth(620)
        self.left_column = left
        # A page whose minimum is larger than the screen scrolls: the window never grows by
        # itself (a wide table, a long message) past the screen's edge.
        pages_area = QScrollArea()
        pages_area.setObjectName("pagesArea")
        pages_area.setWidgetResizable(True)
        pages_area.setFrameShape(QFrame.Shape.NoFrame)
        pages_area.setWidget(PagesHolder(self.pages))
        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(pages_area)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([470, 930])  # wide enough for the machines table's columns
        splitter.setChildrenCollapsible(False)  # hidden only by the View menu, which shows it
        self.setCentralWidget(splitter)

        toolbar = self.addToolBar("Main")
        toolbar.setMovable(False)
        self.act_home = QAction("Home", self)
        self.act_new = QAction("New run…", self)
        self.act_demo = QAction("Train demo", self)
        self.act_dashboard = QAction("Dashboard", self)
        for act in (self.act_home, self.act_new, self.act_demo, self.act_dashboard):
            toolbar.addAction(act)
        toolbar.addSeparator()
        self.act_doctor = QAction("Cluster doctor…", self)
        self.act_doctor.setToolTip("Check that the registered machines can train together")
        self.act_doctor.triggered.connect(lambda: self.machines.machine_actions.open_doctor())
        toolbar.addAction(self.act_doctor)
        self.runs_page = RunsPage()
        self.pages.addWidget(self.runs_page)
        self.act_runs = QAction("Runs", self)
        self.act_runs.setToolTip("Runs still training (reattach) and finished runs (open)")
        toolbar.addAction(self.act_runs)
        self.act_runs.triggered.connect(self.show_runs)
        self.act_sweep = QAction("Sweep", self)
        self.act_sweep.setToolTip("Train the last run setup many times with settings varied, "
                                  "or open a sweep's folder")
        sweep_menu = QMenu(self)
        sweep_menu.addAction("New sweep of the last run setup…").triggered.connect(
            self.new_sweep)
        sweep_menu.addAction("Open a sweep…").triggered.connect(self._choose_sweep)
        self.act_sweep.setMenu(sweep_menu)
        toolbar.addAction(self.act_sweep)
        sweep_button = toolbar.widgetForAction(self.act_sweep)
        if isinstance(sweep_button, QToolButton):
            sweep_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.sweep_view: SweepView | None = None  # made on first use: Optuna loads then
        self._add_view_menu()
        self.act_tensorboard = QAction("TensorBoard", self)
        self.act_tensorboard.setToolTip("Every run and sweep in TensorBoard (curves, HParams)")
        self.act_tensorboard.triggered.connect(self._open_tensorboard)
        toolbar.addAction(self.act_tensorboard)
        self.act_preferences = QAction("Preferences…", self)
        self.act_preferences.setToolTip("MLflow: send runs there, and where")
        self.act_preferences.triggered.connect(self.open_preferences)
        toolbar.addAction(self.act_preferences)
        self.act_quit = QAction("Quit", self)
        self.act_quit.setShortcut(QKeySequence("Ctrl+Q"))
        self.act_quit.triggered.connect(self.close)  # closeEvent asks about a running run
        self.addAction(self.act_quit)
        self.runs_page.reattachRequested.connect(self._reattach)
        self.runs_page.openRequested.connect(self._open_run)
        self.runs_page.compareRequested.connect(self.compare_runs)
        self.runs_page.cloneRequested.connect(self.clone_run)
        self.runs_page.sweepRequested.connect(self.open_sweep)
        self.runs_page.resume_requested.connect(self.resume)
        self.runs_page.tensorboardRequested.connect(self._tensorboard_on)
        self.runs_page.mlflowRequested.connect(self._export_to_mlflow)
        self.queue_panel = RunQueuePanel()  # queued runs, above the list; hidden while empty
        self.runs_page.add_section(self.queue_panel)
        self.queue_panel.changed.connect(self.runs_page.refresh)  # one started or left
        self.compare: CompareView | None = None  # made on first use: pyqtgraph loads then
        self._run_notices: RunNotices | None = None  # made with the first run
        self.runs_page.loaded.connect(self._announce_running)
        QTimer.singleShot(200, self, self.runs_page.refresh)  # after the first paint
        self.session.started.connect(self._on_started)
        self.session.failed.connect(self._on_launch_error)
        self.session.progress.connect(self._on_progress)
        self.session.ended_while_closed.connect(self._on_ended_while_closed)
        self.session.ended.connect(self._on_run_ended)
        self.act_dashboard.setEnabled(False)
        self.act_home.triggered.connect(lambda: self.pages.setCurrentWidget(self.home))
        self.act_dashboard.triggered.connect(self._show_dashboard)
        self.act_new.triggered.connect(self.open_wizard)
        self.act_demo.triggered.connect(self.train_demo)
        self.home.train_demo.clicked.connect(self.train_demo)
        self.home.new_run.clicked.connect(self.open_wizard)
        self.machine.factsChanged.connect(self._on_facts)
        self.statusBar().showMessage("Detecting this machine…")
        # After the first paint: the probes start processes that compete for the CPU.
        # The window as the timers' context: closed before they fire, they do not fire.
        QTimer.singleShot(150, self, self.machine.refresh)
        QTimer.singleShot(100, self, lambda: self.machines)

    def _add_view_menu(self) -> None:
        """The left column beside Home only (the run's pages get the full width), or beside
        every page: a menu action, so a hidden column always comes back."""
        self.act_column = QAction("This machine and Machines beside every page", self)
        self.act_column.setCheckable(True)
        self.act_column.setShortcut(QKeySequence("Ctrl+M"))
        self.act_column.toggled.connect(lambda _on: self._place_column())
        view = self.menuBar().addMenu("&View")
        view.addAction(self.act_home)
        view.addAction(self.act_dashboard)
        view.addAction(self.act_runs)
        view.addSeparator()
        view.addAction(self.act_column)
        self.pages.currentChanged.connect(lambda _index: self._place_column())

    def _place_column(self) -> None:
        self.left_column.setVisible(self.act_column.isChecked()
                                    or self.pages.currentWidget() is self.home)

    @property
    def machines(self) -> MachinesPanel:
        if self._machines is None:
            from dtgui.ui.machines.panel import MachinesPanel

            self._machines = MachinesPanel(local_facts=lambda: self.machine.facts)
            stretch = self._left_layout.count() - 1
            self._left_layout.takeAt(stretch)
            self._left_layout.addWidget(self._machines, 1)
            self._machines.machinesChanged.connect(self._forget_removed_machines)
        return self._machines

    def _forget_removed_machines(self) -> None:
        """A launch's failure on Home is about machines: once one of them is removed, the
        message no longer applies."""
        names = {m.name for m in self.machines.machines()}
        if self._launch_machines - names:
            self._launch_machines &= names
            if self.home.failed:
                self.home.set_status("")

    # -- actions ---------------------------------------------------------------------------
    def open_preferences(self) -> None:
        from dtgui.ui.dialogs.preferences import PreferencesDialog

        PreferencesDialog(self).open()

    def _tensorboard_on(self, folders: list[Path]) -> None:
        from dtgui.ui.dialogs.preferences import show_in_tensorboard

        self.statusBar().showMessage("Starting TensorBoard…", 10000)
        show_in_tensorboard(self, folders)

    def _export_to_mlflow(self, records: list[RunRecord]) -> None:
        from dtgui.ui.dialogs.preferences import export_to_mlflow

        export_to_mlflow(self, records)

    def _open_tensorboard(self) -> None:
        self._tensorboard_on([runs_dir()])

    def train_demo(self) -> None:
        self.launch(demo_plan(self.machine.facts))

    def open_wizard(self) -> None:
        last, message = load_last_plan()
        if message:
            self.statusBar().showMessage(message, 10000)
        self._wizard_from(last)

    def clone_run(self, folder: Path) -> None:
        """Open the wizard filled with a past run's setup (its plan read in the background)."""
        from dtgui.launch.run_admin import source_plan

        def fill(got: tuple[Plan, TargetJob | None]) -> None:
            self._wizard_from(*got)

        run_in_thread(lambda: source_plan(folder), fill, self._report_error, context=self)

    def _wizard_from(self, plan: Plan | None, job: TargetJob | None = None) -> RunWizard:
        from dtgui.ui.wizard import RunWizard

        wizard = self.wizard = RunWizard(self.machine.facts, None, self)
        if plan is not None:
            wizard.load_plan(plan, job)
        wizard.set_machines(self.machines.machines())  # tasks may go to registered machines
        wizard.set_gpu_facts(self.machines.gpu_facts())
        wizard.set_target_facts(self.machines.kind_facts())  # a kind's job checked against them
        wizard.set_machine_problems(self.machines.problems())  # the review names a ✗ in use
        wizard.accepted.connect(self._on_wizard_accepted)
        wizard.sweepRequested.connect(self._sweep_from_wizard)
        wizard.open()
        return wizard

    def _on_wizard_accepted(self) -> None:
        wizard = self.wizard
        if wizard is None:
            return
        plan = wizard.plan()
        run_in_thread(lambda: save_last_plan(plan), lambda _: None, self._report_error,
                      context=self)
        export_dir = wizard.export_dir()
        job = wizard.review_page.job  # what the chosen target's box made (a Slurm job), or None
        restarts = wizard.review_page.machines_box.max_restarts()
        if wizard.action() == "export" and export_dir is not None:
            self.export(plan, Path(export_dir), job)
        elif wizard.review_page.when_free.isChecked():
            self.queue_run(plan, max_restarts=restarts, job=job)
        else:
            self.launch(plan, max_restarts=restarts, job=job)

    def launch(self, plan: Plan, max_restarts: int = 0, job: TargetJob | None = None) -> None:
        """Start `plan` (on the target of `job`, what a wizard box made, when given) and show
        it."""
        if not self._may_start():
            return
        self._set_launch_enabled(False)
        self._launch_machines = {t.machine for t in plan.tasks if not t.is_local}
        self.home.set_status(f"Starting {plan.run_name}…")
        self.statusBar().showMessage(f"Writing the bundle and starting {plan.run_name}…")
        self.session.launch(plan, runs_dir(), RunPolicy(max_restarts=max_restarts), job)

    def queue_run(self, plan: Plan, max_restarts: int = 0, job: TargetJob | None = None) -> None:
        """Put `plan` in the run queue: it starts when its GPUs and machines are free, in
        the background (the Runs page shows it waiting, then running)."""
        from dtgui.launch.queue.run_queue import QueuedRun, enqueue

        def queued(entry: QueuedRun) -> None:
            self.statusBar().showMessage(
                f"{plan.run_name} is queued (position {entry.position}): it starts when its GPUs "
                "and machines are free; see Runs.", 15000)
            self.show_runs()

        run_in_thread(lambda: enqueue(plan, job=job, max_restarts=max_restarts), queued,
                      self._report_error, context=self)

    def show_runs(self) -> None:
        self.runs_page.refresh()
        self.pages.setCurrentWidget(self.runs_page)

    def compare_runs(self, records: list[RunRecord]) -> None:
        """Show the chosen runs side by side (read in the background)."""
        if self.compare is None:
            from dtgui.ui.compare import CompareView

            self.compare = CompareView()
            self.compare.closed.connect(self.show_runs)
            self.pages.addWidget(self.compare)
        self.compare.load(records)
        self.pages.setCurrentWidget(self.compare)

    def open_sweep(self, folder: Path) -> None:
        """Show the sweep in `folder` (its trials read in the background)."""
        from dtgui.core.runs.run_index import remember_sweep

        view = self._sweep_view()
        view.open(folder)
        self.pages.setCurrentWidget(view)
        run_in_thread(lambda: remember_sweep(folder), lambda _: None, context=self)

    def _sweep_view(self) -> SweepView:
        if self.sweep_view is None:
            from dtgui.ui.pages.sweep_view import SweepView

            self.sweep_view = SweepView()
            self.sweep_view.closed.connect(self.show_runs)
            self.sweep_view.compareRequested.connect(self.compare_runs)
            self.sweep_view.openRequested.connect(self._open_run)
            self.pages.addWidget(self.sweep_view)
        return self.sweep_view

    def new_sweep(self) -> None:
        """Set up a sweep of the last run setup (the wizard remembers it)."""
        plan, message = load_last_plan()
        if plan is None:
            self.statusBar().showMessage(message or "Set up a run first (New run…): a sweep "
                                         "trains it with settings varied.", 10000)
            return
        self.sweep_plan(plan)

    def sweep_plan(self, plan: Plan, parent: QWidget | None = None) -> SweepDialog:
        """Show the dialog that sets up a sweep of `plan`; once accepted the sweep runs in a
        process of its own, shown by the sweep view."""
        from dtgui.launch.drivers import process_machines
        from dtgui.ui.dialogs.sweep_dialog import SweepDialog

        machines = self.machines.machines()
        over_ssh = process_machines(machines)
        dialog = SweepDialog(plan, parent=parent or self,
                             machines=[m.name for m in over_ssh],
                             gpus=self.machines.gpu_facts(),
                             job_machines=[m for m in machines if m not in over_ssh])
        dialog.accepted.connect(lambda: self._start_sweep(dialog))
        dialog.open()
        return dialog

    def _sweep_from_wizard(self, plan: Plan) -> None:
        """The wizard's Sweep…: the dialog over the wizard, which closes once a sweep starts
        (and remembers the setup, as a launch does)."""
        wizard = self.wizard
        dialog = self.sweep_plan(plan, wizard)

        def started() -> None:
            run_in_thread(lambda: save_last_plan(plan), lambda _: None, self._report_error,
                          context=self)
            if wizard is not None:
                wizard.reject()

        dialog.accepted.connect(started)

    def _start_sweep(self, dialog: SweepDialog) -> None:
        """The sweep's process started and its view shown (which says why it could not)."""
        folder, spec, plan = dialog.folder(), dialog.spec(), dialog.base_plan
        if folder is None:
            return
        view = self._sweep_view()
        view.start(folder, spec, plan)
        self.pages.setCurrentWidget(view)

    def _choose_sweep(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Open a sweep's folder", str(Path.home()))
        if folder:
            self.open_sweep(Path(folder))

    def _reattach(self, record: RunRecord) -> None:
        if self._may_start():
            self.statusBar().showMessage(f"Reattaching to {record.run_name}…")
            self.session.reattach(record)

    def resume(self, run_dir: Path, steps: int | None = None) -> None:
        """Resume the ended run in `run_dir` from its newest checkpoint (the dashboard's
        Resume; `steps`: the step it trains to, default its plan's)."""
        if self._may_start():
            self.statusBar().showMessage(f"Resuming {run_dir.name}…")
            self._set_launch_enabled(False)
            self.session.resume(run_dir, steps)

    def _open_run(self, record: RunRecord) -> None:
        if self._may_start():
            self.session.open(record)

    def _may_start(self) -> bool:
        """Only one run is shown at a time; a live one has to end (or be kept training
        while dtgui closes) before another is started or reattached."""
        if self.session.busy:
            self.statusBar().showMessage("A run is being started: wait a moment.", 5000)
            return False
        if self.session.active:
            QMessageBox.information(self, "A run is active",
                                    "Stop the current run (or quit, keeping it training) "
                                    "before starting or reattaching another.")
            return False
        return True

    def export(self, plan: Plan, destination: Path, job: TargetJob | None = None) -> None:
        """Write the bundle of `plan` (as `job`, what a wizard box made, when given: its
        driver writes it)."""
        self.statusBar().showMessage(f"Exporting to {destination}…")

        from dtgui.launch.run_admin import write_export

        run_in_thread(lambda: write_export(plan, destination, job),
                      lambda written: self._on_exported(*written),
                      self._report_error, context=self)

    # -- callbacks (UI thread) -------------------------------------------------------------
    def _on_facts(self, facts: MachineFacts) -> None:
        self.home.set_plan_text(demo_plan(facts))
        if facts.tf is not None:
            self.statusBar().showMessage("Ready.", 5000)

    @property
    def run_notices(self) -> RunNotices:
        """Desktop notifications (tray, else a toast) when the shown run ends or restarts."""
        if self._run_notices is None:
            from dtgui.ui.notify import Notifier, RunNotices

            self._run_notices = RunNotices(Notifier(self), self.session)
        return self._run_notices

    def _on_started(self, source: RunSource) -> None:
        self.home.set_status("")
        _ = self.run_notices  # listening before the run can restart or end
        self._ensure_dashboard().attach(source)
        self.act_dashboard.setEnabled(True)
        self._show_dashboard()
        if self.session.active:
            self.statusBar().showMessage(f"Running from {source.bundle.path}")
        elif not self.session.following:  # from the history: it ended before it was shown
            self._set_launch_enabled(True)
            self.statusBar().showMessage(f"Run {source.state}: {source.message}")

    def _on_progress(self, text: str) -> None:
        self.home.set_status(f"{text}…" if not text.endswith(")") else text)
        self.statusBar().showMessage(text)

    def _on_ended_while_closed(self, record: RunRecord) -> None:
        self.statusBar().showMessage(
            f"{record.run_name} ended while dtgui was closed ({record.state}): showing its "
            "result.", 15000)
        self.runs_page.refresh()

    def _announce_running(self, rows: list[RunRow]) -> None:
        running = [r for r in rows if r.active and r.kind != SWEEP]
        if running and not self.session.active:
            self.statusBar().showMessage(
                f"{len(running)} run(s) kept training while dtgui was closed: open Runs to "
                "reattach.", 20000)

    def _on_launch_error(self, text: str) -> None:
        self._set_launch_enabled(True)
        first = text.splitlines()[0]
        self.home.set_status(f"<span style='color:#b91c1c'>Could not start: {first}</span>",
                             failed=True)
        self.statusBar().showMessage("Launch failed.", 10000)
        QMessageBox.warning(self, "Could not start the run", first)

    def _on_exported(self, path: Path, how: str) -> None:
        """`how`: how to start the bundle without dtgui (a sentence ending in commands)."""
        self.statusBar().showMessage(f"Exported to {path}", 15000)
        QMessageBox.information(self, "Bundle exported",
                                f"Wrote {path}.\n\nReproduce the run without dtgui: {how}")

    def _report_error(self, exc: BaseException) -> None:
        first = error_message(exc)
        self.statusBar().showMessage(first, 15000)
        QMessageBox.warning(self, "dtgui", first)

    def _ensure_dashboard(self) -> Dashboard:
        if self.dashboard is None:
            import pyqtgraph as pg

            pg.setConfigOptions(antialias=False, background="w", foreground="#374151")
            from dtgui.ui.pages.dashboard import Dashboard

            self.dashboard = Dashboard()
            self.dashboard.listen(self.session)
            self.dashboard.resume_requested.connect(self.resume)
            self.pages.addWidget(self.dashboard)
        return self.dashboard

    def _show_dashboard(self) -> None:
        self.pages.setCurrentWidget(self._ensure_dashboard())

    def _on_run_ended(self, state: str, message: str) -> None:
        """The shown run ended (RunSession.ended): after "Stop and quit", dtgui quits now."""
        self._set_launch_enabled(True)
        self.statusBar().showMessage(f"Run {state}: {message}")
        if self._closing:
            self.close()

    def _set_launch_enabled(self, enabled: bool) -> None:
        for widget in (self.act_new, self.act_demo, self.home.train_demo, self.home.new_run):
            widget.setEnabled(enabled)

    def closeEvent(self, event: QCloseEvent) -> None:
        if not self.session.active:
            if self.dashboard is not None:
                self.dashboard.detach()
            cancel_all_checks()
            event.accept()
            return
        box = QMessageBox(QMessageBox.Icon.Question, "A run is still training",
                          "A run is still training. Keep it training without dtgui (reopen "
                          "dtgui and reattach from Runs), or stop every task of it now?",
                          parent=self)
        keep = box.addButton("Keep training", QMessageBox.ButtonRole.AcceptRole)
        stop = box.addButton("Stop and quit", QMessageBox.ButtonRole.DestructiveRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        if box.clickedButton() is keep:
            if self.dashboard is not None:
                self.dashboard.detach()
            warning = self.session.keep_training()  # the session stops following it
            if warning:
                QMessageBox.warning(self, "The run is not watched", warning)
            cancel_all_checks()
            event.accept()
            return
        if box.clickedButton() is stop:
            self._closing = True
            self.session.request_stop()
            self.statusBar().showMessage("Stopping every task before quitting…")
        event.ignore()
