"""The main window: this machine on the left; the home page or the live dashboard on the right.

It follows every run it starts, reattaches or resumes at once (`RunSessions`: one session a
run), shows one of them on the dashboard with a switcher between them, keeps the Runs page's
rows of running runs live, and asks once what to do with all of them when it closes."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QTimer
from PySide6.QtGui import QCloseEvent, QIcon
from PySide6.QtWidgets import (
    QMainWindow,
    QMessageBox,
    QSplitter,
    QStackedWidget,
    QWidget,
)

from dtgui.core.machines.hardware import MachineFacts
from dtgui.core.plans.plan import Plan
from dtgui.core.runs.records import RunRecord
from dtgui.core.runs.run_index import SWEEP, RunRow
from dtgui.core.settings import (
    last_closed,
    load_last_plan,
    remember_closed,
    runs_dir,
    save_last_plan,
)
from dtgui.core.target_job import TargetJob
from dtgui.launch.checks.model_check import cancel_all as cancel_all_checks
from dtgui.launch.runs.policy import RunPolicy
from dtgui.resources import resource
from dtgui.ui.home_page import HomePage, demo_plan
from dtgui.ui.machine_column import MachineColumn
from dtgui.ui.pages.run_queue_panel import RunQueuePanel
from dtgui.ui.pages.runs_page import RunsPage
from dtgui.ui.pages_holder import scrolled_pages
from dtgui.ui.quit_question import QuitAnswer, ask_on_quit
from dtgui.ui.run_session import RunSession
from dtgui.ui.run_sessions import RunSessions
from dtgui.ui.sweep_pages import SweepPages
from dtgui.ui.window_actions import WindowActions
from dtgui.ui.workers import error_message, run_in_thread

if TYPE_CHECKING:
    from dtgui.ui.compare import CompareView
    from dtgui.ui.dialogs.sweep_dialog import SweepDialog
    from dtgui.ui.machines.panel import MachinesPanel
    from dtgui.ui.notify import RunNotices
    from dtgui.ui.pages.dashboard import Dashboard
    from dtgui.ui.pages.sweep_view import SweepView
    from dtgui.ui.wizard import RunWizard

class MainWindow(QMainWindow):
    def __init__(self) -> None:
        super().__init__()
        self.setWindowTitle("dtgui — distributed TensorFlow training")
        self.setWindowIcon(QIcon(str(resource("icons", "dtgui.svg"))))
        area = self.screen().availableGeometry()  # on a 1366x768 screen too
        self.resize(min(1400, area.width()), min(880, area.height()))
        self.runs = RunSessions(lambda: self.machines, self)  # every run followed here
        self.wizard: RunWizard | None = None
        self._closing = False
        self._opened = time.time()  # a run started before it kept training while dtgui was closed
        self._closed_before = last_closed()  # a run that ended since ended while dtgui was closed
        self._told_ended = False  # Home told of the runs that ended while dtgui was closed
        self._queued_here: dict[str, float] = {}  # run name -> when this window queued it
        self._launch_machines: set[str] = set()  # the last launch's registered machines

        self.home = HomePage()
        self.dashboard: Dashboard | None = None  # made on the first run: pyqtgraph loads then
        self.pages = QStackedWidget()
        self.pages.addWidget(self.home)
        self.sweeps = SweepPages(self, self.pages, lambda: self.machines,
                                 show_runs=self.show_runs, compare_runs=self.compare_runs,
                                 open_run=self._open_run, report_error=self._report_error,
                                 open_mlflow=self.open_mlflow,
                                 open_tensorboard=self.open_tensorboard)
        self.left_column = MachineColumn()
        self.machine = self.left_column.machine
        self.left_column.panelMade.connect(
            lambda panel: panel.machinesChanged.connect(self._forget_removed_machines))
        # A page whose minimum is larger than the screen scrolls: the window never grows by
        # itself (a wide table, a long message) past the screen's edge.
        pages_area = scrolled_pages(self.pages)
        splitter = QSplitter()
        splitter.addWidget(self.left_column)
        splitter.addWidget(pages_area)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([470, 930])  # wide enough for the machines table's columns
        splitter.setChildrenCollapsible(False)  # hidden only by the View menu, which shows it
        self.setCentralWidget(splitter)

        self.runs_page = RunsPage()
        self.pages.addWidget(self.runs_page)
        acts = self.acts = WindowActions(self)
        acts.doctor.triggered.connect(lambda: self.machines.machine_actions.open_doctor())
        acts.runs.triggered.connect(self.show_runs)
        acts.new_sweep.triggered.connect(self.new_sweep)
        acts.open_sweep.triggered.connect(self.sweeps.choose)
        acts.tensorboard.triggered.connect(lambda: self.open_tensorboard(None))
        acts.mlflow.triggered.connect(lambda: self.open_mlflow(None))
        acts.preferences.triggered.connect(self.open_preferences)
        acts.quit.triggered.connect(self.close)  # closeEvent asks about a running run
        acts.column.toggled.connect(lambda _on: self._place_column())
        self.pages.currentChanged.connect(lambda _index: self._place_column())
        self.runs_page.reattachRequested.connect(self._reattach)
        self.runs_page.openRequested.connect(self._open_run)
        self.runs_page.compareRequested.connect(self.compare_runs)
        self.runs_page.cloneRequested.connect(self.clone_run)
        self.runs_page.sweepRequested.connect(self.open_sweep)
        self.runs_page.resumeRequested.connect(self.resume)
        self.runs_page.tensorboardRequested.connect(self.open_tensorboard)
        self.runs_page.mlflowOpenRequested.connect(self.open_mlflow)
        self.runs_page.mlflowRequested.connect(self._export_to_mlflow)
        self.queue_panel = RunQueuePanel()  # queued runs, above the list; hidden while empty
        self.runs_page.add_section(self.queue_panel)
        self.queue_panel.changed.connect(self.runs_page.refresh)  # one started or left
        self.compare: CompareView | None = None  # made on first use: pyqtgraph loads then
        self._run_notices: RunNotices | None = None  # made with the first run
        self.runs_page.loaded.connect(self._announce_running)
        QTimer.singleShot(200, self, self.runs_page.refresh)  # after the first paint
        self.runs.shownChanged.connect(self._on_started)
        self.runs.failed.connect(self._on_launch_error)
        self.runs.progress.connect(self._on_progress)
        self.runs.endedWhileClosed.connect(self._on_ended_while_closed)
        self.runs.runEnded.connect(self._on_run_ended)
        self.runs.made.connect(lambda session: self.run_notices.watch(session))
        self.runs_page.follow(self.runs.followed)  # rows of the runs followed here, live
        acts.home.triggered.connect(lambda: self.pages.setCurrentWidget(self.home))
        acts.dashboard.triggered.connect(self._show_dashboard)
        acts.new.triggered.connect(self.open_wizard)
        acts.demo.triggered.connect(self.train_demo)
        self.home.train_demo.clicked.connect(self.train_demo)
        self.home.new_run.clicked.connect(self.open_wizard)
        self.machine.factsChanged.connect(self._on_facts)
        self.statusBar().showMessage("Detecting this machine…")
        # After the first paint: the probes start processes that compete for the CPU.
        # The window as the timers' context: closed before they fire, they do not fire.
        QTimer.singleShot(150, self, self.machine.refresh)
        QTimer.singleShot(100, self, lambda: self.machines)

    def _place_column(self) -> None:
        self.left_column.setVisible(self.acts.column.isChecked()
                                    or self.pages.currentWidget() is self.home)

    @property
    def session(self) -> RunSession:
        """The session of the shown run (before any run: the one the next launch takes)."""
        return self.runs.shown

    @property
    def machines(self) -> MachinesPanel:
        """The registered machines' panel (MachineColumn.machines: built on first use)."""
        return self.left_column.machines

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

    def open_tensorboard(self, folders: list[Path] | None) -> None:
        """TensorBoard on these runs and sweeps (None: every run dtgui lists)."""
        from dtgui.ui.dialogs.server_link import open_in_tensorboard

        open_in_tensorboard(self, folders)

    def open_mlflow(self, folder: Path | None) -> None:
        """MLflow's UI at this run or sweep (None: dtgui's experiment)."""
        from dtgui.ui.dialogs.server_link import open_in_mlflow

        open_in_mlflow(self, folder)

    def _export_to_mlflow(self, records: list[RunRecord]) -> None:
        from dtgui.ui.dialogs.preferences import export_to_mlflow

        export_to_mlflow(self, records)

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
        wizard.sweepRequested.connect(lambda plan: self.sweeps.from_wizard(plan, wizard))
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
        self._launch_machines = {t.machine for t in plan.tasks if not t.is_local}
        self.home.set_status(f"Starting {plan.run_name}…")
        self.statusBar().showMessage(f"Writing the bundle and starting {plan.run_name}…")
        self.runs.new().launch(plan, runs_dir(), RunPolicy(max_restarts=max_restarts), job)

    def queue_run(self, plan: Plan, max_restarts: int = 0, job: TargetJob | None = None) -> None:
        """Put `plan` in the run queue: it starts when its GPUs and machines are free, in
        the background (the Runs page shows it waiting, then running)."""
        from dtgui.launch.queue.run_queue import QueuedRun, enqueue
        from dtgui.launch.queue.run_queue_process import noted

        def queued(entry: QueuedRun) -> None:
            self._queued_here[entry.entry.name] = entry.entry.queued  # followed once started
            self.statusBar().showMessage(
                f"{plan.run_name} is queued (position {entry.position}): waits for "
                f"{entry.text}; see Runs.", 15000)
            self.show_runs()

        run_in_thread(lambda: noted(enqueue(plan, job=job, max_restarts=max_restarts)), queued,
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
        """Show the sweep in `folder` (SweepPages.open)."""
        self.sweeps.open(folder)

    @property
    def sweep_view(self) -> SweepView | None:
        """The sweep view, once a sweep was shown."""
        return self.sweeps.view

    def new_sweep(self) -> None:
        """Set up a sweep of the last run setup (SweepPages.new)."""
        self.sweeps.new()

    def sweep_plan(self, plan: Plan, parent: QWidget | None = None) -> SweepDialog:
        """The dialog that sets up a sweep of `plan` (SweepPages.dialog)."""
        return self.sweeps.dialog(plan, parent)

    def _reattach(self, record: RunRecord) -> None:
        if self._show_followed(record):
            return
        self.statusBar().showMessage(f"Reattaching to {record.run_name}…")
        self.runs.new().reattach(record)

    def resume(self, run_dir: Path, steps: int | None = None) -> None:
        """Resume the ended run in `run_dir` from its newest checkpoint (the dashboard's
        Resume; `steps`: the step it trains to, default its plan's)."""
        if self.runs.holding(str(run_dir)) is not None:
            self.statusBar().showMessage(f"{run_dir.name} is still training.", 10000)
            return
        self.statusBar().showMessage(f"Resuming {run_dir.name}…")
        self.runs.new().resume(run_dir, steps)

    def _open_run(self, record: RunRecord) -> None:
        if not self._show_followed(record, ended=True):  # its tab, when it has one still
            self.runs.new().open(record)

    def _show_followed(self, record: RunRecord, ended: bool = False) -> bool:
        """Show the run of `record` when this window follows it already, or (`ended`) holds
        it ended (True)."""
        session = self.runs.holding(record.bundle, ended)
        if session is None:
            return False
        self.runs.show(session)
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

            self._run_notices = RunNotices(Notifier(self))
            for session in self.runs.sessions:
                self._run_notices.watch(session)
        return self._run_notices

    def _on_started(self, session: RunSession) -> None:
        """`session`'s run is shown now: started, reattached, opened or switched to."""
        source = session.source
        if source is None:
            return
        if not self.runs.busy():
            self.home.set_status("")
        _ = self.run_notices  # listening (to every session) before the run can end
        self._ensure_dashboard().attach(source)
        self.acts.dashboard.setEnabled(True)
        self._show_dashboard()
        if session.active:
            self.statusBar().showMessage(f"Running from {source.bundle.path}")
        elif not session.following:  # from the history: it ended before it was shown
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
        """Follow the runs this window queued once the queue started them (as the window's
        own launches are followed); say what other runs train unfollowed."""
        followed = self.runs.followed()
        running = [r for r in rows if r.active and r.kind != SWEEP and r.folder not in followed]
        mine = [r for r in running if r.started >= self._queued_here.get(r.name, time.time())]
        for row in mine:
            del self._queued_here[row.name]
        if mine:
            self.runs_page.reattach_rows(mine)
            return
        self._tell_home(running, rows)
        if not running or followed:
            return
        if all(r.started and r.started < self._opened for r in running):
            text = (f"{len(running)} run(s) kept training while dtgui was closed: open Runs "
                    "to reattach.")
        else:  # the queue started it, or `dtgui run` did
            text = (f"{len(running)} run(s) train that this window does not follow (started "
                    "by the queue or from the command line): open Runs to reattach.")
        self.statusBar().showMessage(text, 20000)

    def _tell_home(self, running: list[RunRow], rows: list[RunRow]) -> None:
        """Home's banner: the runs that train unfollowed (Reattach), else, once after the
        start, the runs that ended while dtgui was closed (Open)."""
        if running:
            kept = all(r.started and r.started < self._opened for r in running)
            why = "kept training while dtgui was closed" if kept else "not followed here"
            text = (f"<b>1 run is still training</b> ({why}): {running[0].name}"
                    if len(running) == 1 else
                    f"<b>{len(running)} runs are still training</b> ({why}): "
                    + ", ".join(r.name for r in running))
            self.home.show_notice(text, "Reattach", lambda: self.runs_page.reattach_rows(running))
            return
        if self._told_ended:
            if self.home.notice_button.text() == "Reattach":  # that run is followed now
                self.home.clear_notice()
            return
        self._told_ended = True
        ended = [r for r in rows if r.kind != SWEEP and not r.parent and not r.active and r.ended
                 and self._closed_before < r.ended < self._opened and r.started < self._opened]
        if self._closed_before and ended:
            names = ", ".join(f"{r.name} ({r.state_text})" for r in ended)
            if len(ended) == 1:
                self.home.show_notice(f"<b>1 run ended while dtgui was closed</b>: {names}",
                                      "Open", lambda: self.runs_page.open_rows(ended))
            else:  # which to open first is the user's choice, on Runs
                self.home.show_notice(f"<b>{len(ended)} runs ended while dtgui was closed"
                                      f"</b>: {names}", "Show them in Runs", self.show_runs)
        else:
            self.home.clear_notice()

    def _on_launch_error(self, text: str) -> None:
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
            from dtgui.ui.pages.run_switcher import RunSwitcher

            self.dashboard = Dashboard()
            self.dashboard.listen(self.runs)  # the shown run's life
            self.dashboard.set_switcher(RunSwitcher(self.runs))
            self.dashboard.resumeRequested.connect(self.resume)
            self.dashboard.mlflowRequested.connect(self.open_mlflow)
            self.dashboard.tensorboardRequested.connect(self.open_tensorboard)
            self.pages.addWidget(self.dashboard)
        return self.dashboard

    def _show_dashboard(self) -> None:
        self.pages.setCurrentWidget(self._ensure_dashboard())

    def _on_run_ended(self, session: RunSession) -> None:
        """A followed run ended (RunSession.ended), shown or not: after "Stop and quit",
        dtgui quits once the last one has."""
        source = session.source
        if source is not None:
            self.runs_page.live.run_ended(source)  # its row says it now, shown or not
            self.statusBar().showMessage(f"{source.run_name}: {source.state}. {source.message}")
        if self._closing and not self.runs.live():
            self.close()

    def closeEvent(self, event: QCloseEvent) -> None:
        self._close(event)
        if event.isAccepted():
            with contextlib.suppress(OSError):  # only the next start's banner needs it
                remember_closed()

    def _close(self, event: QCloseEvent) -> None:
        live = self.runs.live()
        if not live:
            if self.dashboard is not None:
                self.dashboard.detach()
            cancel_all_checks()
            event.accept()
            return
        queued = sum(q.entry.waiting or q.entry.launching for q in self.queue_panel.runs)
        answer = ask_on_quit(self, [s.source.run_name for s in live if s.source is not None],
                             queued)
        if answer is QuitAnswer.KEEP:
            if self.dashboard is not None:
                self.dashboard.detach()
            # each session stops following its run and hands it to a watcher
            warnings = [f"{s.source.run_name if s.source is not None else 'A run'}: {w}"
                        for s, w in ((s, s.keep_training()) for s in live) if w]
            if warnings:
                QMessageBox.warning(self, "Not every run is watched", "\n\n".join(warnings))
            cancel_all_checks()
            event.accept()
            return
        if answer is QuitAnswer.STOP:
            self._closing = True
            for session in live:
                session.request_stop()
            self.statusBar().showMessage("Stopping every task of every run before quitting…")
        event.ignore()
