"""The main window: this machine on the left; the home page or the live dashboard on the right."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMenu,
    QMessageBox,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.bundle import render_bundle
from dtgui.core.hardware import MachineFacts
from dtgui.core.placement import place_local
from dtgui.core.plan import DeviceKind, Plan
from dtgui.core.runs import RunRecord
from dtgui.core.settings import load_last_plan, runs_dir, save_last_plan
from dtgui.core.strategies import STRATEGIES, Strategy, recommend
from dtgui.launch.model_check import cancel_all as cancel_all_checks
from dtgui.launch.policy import RunPolicy
from dtgui.launch.run_source import RunSource
from dtgui.resources import resource
from dtgui.ui.local_machine import LocalMachinePanel
from dtgui.ui.run_session import RunSession
from dtgui.ui.runs_page import RunsPage
from dtgui.ui.workers import error_message, run_in_thread

if TYPE_CHECKING:
    from dtgui.ui.compare import CompareView
    from dtgui.ui.dashboard import Dashboard
    from dtgui.ui.machines.panel import MachinesPanel
    from dtgui.ui.notify import RunNotices
    from dtgui.ui.sweep_dialog import SweepDialog
    from dtgui.ui.sweep_view import SweepView
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

    def set_plan_text(self, plan: Plan) -> None:
        info = STRATEGIES[plan.strategy]
        where = "logical CPU devices" if plan.device_kind == "cpu" else "GPUs"
        self.demo_text.setText(
            f"1797 real 8×8 handwritten digits (bundled, works offline; 297 held out to "
            f"validate), a 3-layer MLP, "
            f"{plan.steps} steps with <b>{info.title}</b> over {plan.total_replicas} replica(s) "
            f"on {where}, global batch {plan.global_batch}. One loss curve per replica, live."
        )


class MainWindow(QMainWindow):
    def __init__(self) -> None:
        super().__init__()
        self.setWindowTitle("dtgui — distributed TensorFlow training")
        self.setWindowIcon(QIcon(str(resource("icons", "dtgui.svg"))))
        self.resize(1400, 880)
        self.session = RunSession(lambda: self.machines, self)
        self.wizard: RunWizard | None = None
        self._closing = False

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
        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(self.pages)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([470, 930])  # wide enough for the machines table's columns
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
        self.compare: CompareView | None = None  # made on first use: pyqtgraph loads then
        self._run_notices: RunNotices | None = None  # made with the first run
        self.runs_page.loaded.connect(self._announce_running)
        self.runs_page.refresh()
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

    @property
    def machines(self) -> MachinesPanel:
        if self._machines is None:
            from dtgui.ui.machines.panel import MachinesPanel

            self._machines = MachinesPanel(local_facts=lambda: self.machine.facts)
            stretch = self._left_layout.count() - 1
            self._left_layout.takeAt(stretch)
            self._left_layout.addWidget(self._machines, 1)
        return self._machines

    # -- actions ---------------------------------------------------------------------------
    def open_preferences(self) -> None:
        from dtgui.ui.preferences import PreferencesDialog

        PreferencesDialog(self).open()

    def _open_tensorboard(self) -> None:
        from dtgui.core.settings import runs_dir
        from dtgui.ui.preferences import show_in_tensorboard

        self.statusBar().showMessage("Starting TensorBoard…", 10000)
        show_in_tensorboard(self, [runs_dir()])

    def train_demo(self) -> None:
        self.launch(demo_plan(self.machine.facts))

    def open_wizard(self) -> None:
        from dtgui.ui.wizard import RunWizard

        last, message = load_last_plan()
        if message:
            self.statusBar().showMessage(message, 10000)
        wizard = self.wizard = RunWizard(self.machine.facts, last, self)
        wizard.set_machines(self.machines.machines())  # tasks may go to registered machines
        wizard.set_gpu_facts(self.machines.gpu_facts())
        wizard.set_target_facts(self.machines.cluster_facts())  # its jobs fit the partitions
        wizard.accepted.connect(self._on_wizard_accepted)
        wizard.sweepRequested.connect(self._sweep_from_wizard)
        wizard.open()

    def _on_wizard_accepted(self) -> None:
        wizard = self.wizard
        if wizard is None:
            return
        plan = wizard.plan()
        run_in_thread(lambda: save_last_plan(plan), lambda _: None, self._report_error,
                      context=self)
        export_dir = wizard.export_dir()
        job = wizard.review_page.job  # what the chosen target's box made (a Slurm job), or None
        if wizard.action() == "export" and export_dir is not None:
            self.export(plan, Path(export_dir), job)
        else:
            self.launch(plan, max_restarts=wizard.review_page.machines_box.max_restarts(),
                        job=job)

    def launch(self, plan: Plan, max_restarts: int = 0, job: object | None = None) -> None:
        """Start `plan` (on the target of `job`, what a wizard box made, when given) and show
        it."""
        if not self._may_start():
            return
        self._set_launch_enabled(False)
        self.home.status.setText(f"Starting {plan.run_name}…")
        self.statusBar().showMessage(f"Writing the bundle and starting {plan.run_name}…")
        self.session.launch(plan, runs_dir(), RunPolicy(max_restarts=max_restarts), job)

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
        view = self._sweep_view()
        view.open(folder)
        self.pages.setCurrentWidget(view)

    def _sweep_view(self) -> SweepView:
        if self.sweep_view is None:
            from dtgui.ui.sweep_view import SweepView

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
        from dtgui.launch.drivers import ssh_machines
        from dtgui.ui.sweep_dialog import SweepDialog

        machines = self.machines.machines()
        over_ssh = ssh_machines(machines)
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

    def export(self, plan: Plan, destination: Path, job: object | None = None) -> None:
        """Write the bundle of `plan` (as `job`, what a wizard box made, when given: its
        driver writes it)."""
        self.statusBar().showMessage(f"Exporting to {destination}…")

        def write() -> tuple[Path, str]:
            if job is not None:
                from dtgui.launch.drivers import export_job

                return export_job(plan, destination, job)
            placed = plan if plan.tasks else place_local(plan)
            path = render_bundle(placed, destination).path
            return path, (f"\n  cd {path}\n  python3 -m pip install -r requirements.txt\n"
                          "  bash run.sh")

        run_in_thread(write, lambda written: self._on_exported(*written),
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
        self.home.status.setText("")
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
        self.home.status.setText(f"{text}…" if not text.endswith(")") else text)
        self.statusBar().showMessage(text)

    def _on_ended_while_closed(self, record: RunRecord) -> None:
        self.statusBar().showMessage(
            f"{record.run_name} ended while dtgui was closed ({record.state}): showing its "
            "result.", 15000)
        self.runs_page.refresh()

    def _announce_running(self, records: list[RunRecord]) -> None:
        running = [r for r in records if r.is_active]
        if running and not self.session.active:
            self.statusBar().showMessage(
                f"{len(running)} run(s) kept training while dtgui was closed: open Runs to "
                "reattach.", 20000)

    def _on_launch_error(self, text: str) -> None:
        self._set_launch_enabled(True)
        first = text.splitlines()[0]
        self.home.status.setText(f"<span style='color:#b91c1c'>Could not start: {first}</span>")
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
            from dtgui.ui.dashboard import Dashboard

            self.dashboard = Dashboard()
            self.dashboard.listen(self.session)
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
