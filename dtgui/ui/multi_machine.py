"""The main window's part of issue 4: runs on several machines, the Runs page, reattaching,
and closing dtgui without stopping a run.

`MainWindow` creates one `MultiMachineSupport` and calls it from four marked places (wizard
opened, launch, close). Everything that blocks (SSH, disk) runs in the thread pool; launch
progress comes back through a queued signal.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction, QCloseEvent
from PySide6.QtWidgets import QMessageBox, QToolBar

from dtgui.core.plan import Plan
from dtgui.core.runs import RunRecord
from dtgui.launch.policy import RunPolicy
from dtgui.ui.launch_connect import PreConnected, connect_machines
from dtgui.ui.runs_page import RunsPage
from dtgui.ui.workers import run_in_thread


class MultiMachineSupport(QObject):
    progress = Signal(str, float)  # emitted from a launch's thread; delivered queued

    def __init__(self, window: Any, toolbar: QToolBar) -> None:
        super().__init__(window)
        self.window = window
        self.runs_page = RunsPage()
        window.pages.addWidget(self.runs_page)
        self.act_runs = QAction("Runs", window)
        self.act_runs.setToolTip("Runs still training (reattach) and finished runs (open)")
        self.act_runs.triggered.connect(self.show_runs)
        toolbar.addAction(self.act_runs)
        self.runs_page.reattachRequested.connect(self.reattach)
        self.runs_page.openRequested.connect(self.open)
        self.progress.connect(self._on_progress)
        self.connector: PreConnected | None = None  # the shown run's connections
        self.runs_page.loaded.connect(self._announce)
        self.runs_page.refresh()

    # -- hooks called by MainWindow ---------------------------------------------------------
    def prepare_wizard(self, wizard: Any) -> None:
        """Offer the registered machines (and their GPUs) besides this one."""
        wizard.set_machines(self.window.machines.machines())
        wizard.set_gpu_facts(self.window.machines.gpu_facts())

    def launch(self, plan: Plan, root: Path, policy: RunPolicy) -> bool:
        """Start a plan with tasks on other machines; False when every task is local.

        Every remote machine is connected first, asking the person for a host key, password
        or passphrase when needed; then the launch runs in a thread."""
        if all(t.is_local for t in plan.tasks):
            return False
        registered = {m.name: m for m in self.window.machines.machines()}
        names = [n for n in plan.machine_names if n != "local"]
        missing = [n for n in names if n not in registered]
        if missing:
            self.window._on_launch_error(
                f"{', '.join(missing)} is no longer a registered machine: add it again under "
                "Machines, or choose other machines in the wizard.")
            return True

        def ready(connector: PreConnected) -> None:
            self.connector = connector
            self._on_progress("Connected; checking each machine", 0.1)
            run_in_thread(self._launcher(plan, root, registered, connector, policy),
                          self.window._on_started, self._failed(connector), context=self.window)

        connect_machines(self.window.machines.flow, [registered[n] for n in names],
                         ready=ready, failed=self.window._on_launch_error,
                         progress=self._on_connect_progress)
        return True

    def close_event(self, event: QCloseEvent) -> bool:
        """A run is active: keep it training (detach), stop it, or cancel. Always handled."""
        window = self.window
        box = QMessageBox(QMessageBox.Icon.Question, "A run is still training",
                          "A run is still training. Keep it training without dtgui (reopen "
                          "dtgui and reattach from Runs), or stop every task of it now?",
                          parent=window)
        keep = box.addButton("Keep training", QMessageBox.ButtonRole.AcceptRole)
        stop = box.addButton("Stop and quit", QMessageBox.ButtonRole.DestructiveRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        controller = window.controller
        if box.clickedButton() is keep and hasattr(controller, "detach"):
            if window.dashboard is not None:
                window.dashboard.detach()
            controller.detach()
            self._hand_to_watcher(controller)
            event.accept()
            return True
        if box.clickedButton() is stop:
            window._closing = True
            controller.request_stop()
            window.statusBar().showMessage("Stopping every task before quitting…")
        event.ignore()
        return True

    # -- the Runs page --------------------------------------------------------------------
    def show_runs(self) -> None:
        self.runs_page.refresh()
        self.window.pages.setCurrentWidget(self.runs_page)

    def reattach(self, record: RunRecord) -> None:
        window = self.window
        if window.controller is not None and not window.controller.finished:
            QMessageBox.information(window, "A run is shown",
                                    "Stop the current run (or quit, keeping it training) first.")
            return
        from dtgui.core.machines import Machine
        from dtgui.launch.history import open_run
        from dtgui.launch.multihost import reattach
        from dtgui.launch.watcher import stop_watcher

        panel = self.window.machines
        registry = panel.registry
        machines = [(registry.find(rec.name) if registry is not None else None)
                    or Machine.from_dict(rec.machine) for rec in record.machines
                    if not rec.is_local]
        window.statusBar().showMessage(f"Reattaching to {record.run_name}…")

        def take_back(connector: PreConnected) -> Any:
            # the watcher that enforced the policy while dtgui was closed hands the run back
            if not stop_watcher(record):
                raise RuntimeError("The run's watcher is restarting or stopping its tasks "
                                   "right now: try Reattach again in a moment.")
            fresh = RunRecord.load(Path(record.bundle))  # it may have ended or restarted it
            if not fresh.is_active:
                connector.close_unused()
                return open_run(fresh)
            return reattach(fresh, connect=connector, registry=registry)

        def ready(connector: PreConnected) -> None:
            self.connector = connector
            run_in_thread(lambda: take_back(connector), self._on_reattached,
                          self._failed(connector), context=window)

        connect_machines(panel.flow, machines, ready=ready, failed=window._on_launch_error,
                         progress=self._on_connect_progress)

    def open(self, record: RunRecord) -> None:
        window = self.window
        from dtgui.launch.history import open_run

        def shown(view: Any) -> None:
            window._ensure_dashboard().attach(view)
            window.act_dashboard.setEnabled(True)
            window._show_dashboard()

        run_in_thread(lambda: open_run(record), shown, window._report_error, context=window)

    # -- internals --------------------------------------------------------------------------
    def _launcher(self, plan: Plan, root: Path, registered: dict[str, Any],
                  connector: PreConnected, policy: RunPolicy) -> Callable[[], Any]:
        from dtgui.launch.multihost import Target, launch_on_machines

        gpus: dict[str, list[int]] = {}
        for task in plan.tasks:  # the GPUs chosen in the wizard, per machine, in task order
            gpus.setdefault(task.machine_name, []).extend(
                g for g in task.gpus if g not in gpus.get(task.machine_name, []))
        targets = [Target(name, None if name == "local" else registered[name],
                          plan.machines.get(name, {}).get("python", ""),
                          gpus=tuple(gpus.get(name, ())))
                   for name in plan.machine_names]
        placement = {t.task_id: t.machine_name for t in plan.tasks}
        emit = self.progress.emit
        return lambda: launch_on_machines(plan, placement, targets, root, progress=emit,
                                          policy=policy, connect=connector)

    def _on_reattached(self, result: Any) -> None:
        if getattr(result, "executors", None) is not None:  # a RunController: still training
            self.window._on_started(result)
            return
        window = self.window  # a RunView: the run ended while dtgui was closed
        window._ensure_dashboard().attach(result)
        window.act_dashboard.setEnabled(True)
        window._show_dashboard()
        window.statusBar().showMessage(
            f"{result.record.run_name} ended while dtgui was closed "
            f"({result.record.state}): showing its result.", 15000)
        self.runs_page.refresh()

    def _hand_to_watcher(self, controller: Any) -> None:
        """Keep enforcing the run's failure policy while dtgui is closed (a detached process,
        given this session's secrets on its stdin)."""
        from dtgui.launch.watcher import start_watcher

        record = getattr(controller, "record", None)
        if record is None:
            return
        given = self.connector.secrets.as_dict() if self.connector is not None else {}
        try:
            start_watcher(record, given, controller.policy.max_restarts)
        except OSError as exc:
            QMessageBox.warning(
                self.window, "The run is not watched",
                f"The run keeps training, but nothing will stop it if a task fails while "
                f"dtgui is closed ({exc}). Reopen dtgui and reattach to watch it.")

    def _failed(self, connector: PreConnected) -> Callable[[str], None]:
        def failed(text: str) -> None:
            run_in_thread(connector.close_unused, lambda _: None, lambda _: None)
            self.window._on_launch_error(text)

        return failed

    def _on_connect_progress(self, text: str) -> None:
        self.window.home.status.setText(text)
        self.window.statusBar().showMessage(text)

    def _announce(self, records: list[RunRecord]) -> None:
        running = [r for r in records if r.is_active]
        if running and (self.window.controller is None or self.window.controller.finished):
            self.window.statusBar().showMessage(
                f"{len(running)} run(s) kept training while dtgui was closed: open Runs to "
                "reattach.", 20000)

    def _on_progress(self, text: str, fraction: float) -> None:
        self.window.home.status.setText(f"{text}… ({fraction:.0%})")
        self.window.statusBar().showMessage(text)
