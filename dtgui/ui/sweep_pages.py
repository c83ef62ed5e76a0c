"""The main window's sweeps: the sweep view among its pages (made on first use: Optuna loads
then), the dialog that sets a sweep up (from the last run setup, or over the wizard), starting
one and opening one's folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtWidgets import QDialog, QFileDialog, QMainWindow, QStackedWidget, QWidget

from dtgui.core.plans.plan import Plan
from dtgui.core.runs.records import RunRecord
from dtgui.core.settings import load_last_plan, save_last_plan
from dtgui.ui.workers import run_in_thread

if TYPE_CHECKING:
    from dtgui.ui.dialogs.sweep_dialog import SweepDialog
    from dtgui.ui.machines.panel import MachinesPanel
    from dtgui.ui.pages.sweep_view import SweepView


class SweepPages:
    """Sweeps for `window`, whose `pages` show the sweep view; `machines()` the registered
    machines' panel; the view's Close shows `show_runs()`, its Compare, Open and Open in reach
    `compare_runs`, `open_run`, `open_mlflow` and `open_tensorboard`."""

    def __init__(self, window: QMainWindow, pages: QStackedWidget,
                 machines: Callable[[], MachinesPanel], *, show_runs: Callable[[], None],
                 compare_runs: Callable[[list[RunRecord]], None],
                 open_run: Callable[[RunRecord], None],
                 report_error: Callable[[BaseException], None],
                 open_mlflow: Callable[[Path], None],
                 open_tensorboard: Callable[[list[Path]], None]) -> None:
        self._window, self._pages, self._machines = window, pages, machines
        self._show_runs, self._compare_runs = show_runs, compare_runs
        self._open_run, self._report_error = open_run, report_error
        self._open_mlflow, self._open_tensorboard = open_mlflow, open_tensorboard
        self.view: SweepView | None = None  # made on first use

    def open(self, folder: Path) -> None:
        """Show the sweep in `folder` (its trials read in the background)."""
        from dtgui.core.runs.records import remember_sweep

        view = self._the_view()
        view.open(folder)
        self._pages.setCurrentWidget(view)
        run_in_thread(lambda: remember_sweep(folder), lambda _: None, context=self._window)

    def _the_view(self) -> SweepView:
        if self.view is None:
            from dtgui.ui.pages.sweep_view import SweepView

            self.view = SweepView()
            self.view.closed.connect(self._show_runs)
            self.view.compareRequested.connect(self._compare_runs)
            self.view.openRequested.connect(self._open_run)
            self.view.mlflowRequested.connect(self._open_mlflow)
            self.view.tensorboardRequested.connect(self._open_tensorboard)
            self._pages.addWidget(self.view)
        return self.view

    def new(self) -> None:
        """Set up a sweep of the last run setup (the wizard remembers it)."""
        plan, message = load_last_plan()
        if plan is None:
            self._window.statusBar().showMessage(
                message or "Set up a run first (New run…): a sweep trains it with settings "
                "varied.", 10000)
            return
        self.dialog(plan)

    def dialog(self, plan: Plan, parent: QWidget | None = None) -> SweepDialog:
        """Show the dialog that sets up a sweep of `plan`; once accepted the sweep runs in a
        process of its own, shown by the sweep view."""
        from dtgui.launch.drivers import process_machines
        from dtgui.ui.dialogs.sweep_dialog import SweepDialog

        panel = self._machines()
        machines = panel.machines()
        over_ssh = process_machines(machines)
        dialog = SweepDialog(plan, parent=parent or self._window,
                             machines=[m.name for m in over_ssh],
                             gpus=panel.gpu_facts(),
                             job_machines=[m for m in machines if m not in over_ssh])
        dialog.accepted.connect(lambda: self._start(dialog))
        dialog.open()
        return dialog

    def from_wizard(self, plan: Plan, wizard: QDialog | None) -> None:
        """The wizard's Sweep…: the dialog over the wizard, which closes once a sweep starts
        (and remembers the setup, as a launch does)."""
        dialog = self.dialog(plan, wizard)

        def started() -> None:
            run_in_thread(lambda: save_last_plan(plan), lambda _: None, self._report_error,
                          context=self._window)
            if wizard is not None:
                wizard.reject()

        dialog.accepted.connect(started)

    def _start(self, dialog: SweepDialog) -> None:
        """The sweep's process started and its view shown (which says why it could not)."""
        folder, spec, plan = dialog.folder(), dialog.spec(), dialog.base_plan
        if folder is None:
            return
        view = self._the_view()
        view.start(folder, spec, plan)
        self._pages.setCurrentWidget(view)

    def choose(self) -> None:
        """Open a sweep's folder the user picks."""
        folder = QFileDialog.getExistingDirectory(self._window, "Open a sweep's folder",
                                                  str(Path.home()))
        if folder:
            self.open(Path(folder))
