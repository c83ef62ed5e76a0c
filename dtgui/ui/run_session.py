"""The run the window shows, whatever kind it is: launch, reattach, open, stop, keep training.

One `RunSession` owns the shown run: a live `RunController` (tasks on this machine, on
registered machines, or both: the controller does not care) or a `RunView` (a run that has
ended, from the history). The main window follows its typed signals and never asks which kind
it holds. Everything that blocks (SSH, disk, processes) runs in background workers; remote
machines are connected first through the Machines panel's dialogs (host keys, passwords).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from dtgui.core.machines import Machine
from dtgui.core.plan import Plan
from dtgui.core.runs import RunRecord
from dtgui.launch.policy import RunPolicy
from dtgui.ui.launch_connect import PreConnected, connect_machines
from dtgui.ui.workers import Worker, create_worker, run_in_thread

if TYPE_CHECKING:
    from dtgui.launch.controller import RunController
    from dtgui.launch.history import RunView
    from dtgui.ui.machines.panel import MachinesPanel

    RunSource = RunController | RunView


class RunSession(QObject):
    """Launches, reattaches to or opens one run at a time and says what happens."""

    started = Signal(object)  # RunController | RunView: the run to show now
    progress = Signal(str)  # what a launch or reattach is doing
    failed = Signal(str)  # a launch, reattach or open could not be done: why
    ended_while_closed = Signal(object)  # RunRecord of a run that ended while dtgui was closed

    def __init__(self, machines: Callable[[], MachinesPanel], parent: QObject | None = None,
                 ) -> None:
        super().__init__(parent)
        self._machines = machines
        self.source: RunSource | None = None
        self.connector: PreConnected | None = None  # the shown run's SSH connections
        self.busy = False  # a launch or reattach is under way

    # -- state -------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        """A run is shown and still training (or stopping)."""
        return self.source is not None and not self.source.finished

    @property
    def message(self) -> str:
        return self.source.message if self.source is not None else ""

    # -- starting a run ------------------------------------------------------------------------
    def launch(self, plan: Plan, root: Path, policy: RunPolicy) -> None:
        """Write the bundle and start every task (remote machines are connected first)."""
        names = [n for n in plan.machine_names if n != "local"]
        # a run on this machine alone needs no machines panel (paramiko, the keyring)
        registered = {m.name: m for m in self._machines().machines()} if names else {}
        missing = [n for n in names if n not in registered]
        if missing:
            self.failed.emit(f"{', '.join(missing)} is no longer a registered machine: add it "
                             "again under Machines, or choose other machines in the wizard.")
            return
        self.busy = True

        def start(connector: PreConnected) -> None:
            self.connector = connector
            self.progress.emit("Connected; checking each machine" if names
                               else f"Writing the bundle and starting {plan.run_name}")
            create_worker(self._launcher(plan, root, registered, connector, policy),
                          on_done=self._show, on_error=self._failed(connector),
                          on_progress=self.progress.emit, context=self)

        if names:
            self._connect([registered[n] for n in names], start)
        else:
            start(PreConnected.nothing())

    def reattach(self, record: RunRecord) -> None:
        """Take a run that kept training while dtgui was closed back from its watcher."""
        from dtgui.launch.history import open_run
        from dtgui.launch.multihost import reattach
        from dtgui.launch.watcher import stop_watcher

        panel = self._machines()
        registry = panel.registry
        machines = [(registry.find(rec.name) if registry is not None else None)
                    or Machine.from_dict(rec.machine) for rec in record.machines
                    if not rec.is_local]
        self.busy = True
        self.progress.emit(f"Reattaching to {record.run_name}")

        def take_back(connector: PreConnected) -> Any:
            # the watcher that kept the policy while dtgui was closed hands the run back
            if not stop_watcher(record):
                raise RuntimeError("The run's watcher is restarting or stopping its tasks "
                                   "right now: try Reattach again in a moment.")
            fresh = RunRecord.load(Path(record.bundle))  # it may have ended or restarted it
            if not fresh.is_active:
                connector.close_unused()
                return open_run(fresh)
            return reattach(fresh, connect=connector, registry=registry)

        def start(connector: PreConnected) -> None:
            self.connector = connector
            run_in_thread(lambda: take_back(connector), self._reattached,
                          self._failed(connector), context=self)

        self._connect(machines, start)

    def open(self, record: RunRecord) -> None:
        """Show an ended run from the history (read from its local bundle)."""
        from dtgui.launch.history import open_run

        self.busy = True
        run_in_thread(lambda: open_run(record), self._show, self._open_failed, context=self)

    # -- a shown run -----------------------------------------------------------------------------
    def request_stop(self) -> None:
        if self.source is not None:
            self.source.request_stop()

    def keep_training(self) -> str:
        """Let the active run go on without dtgui: stop following it and hand it to a
        headless watcher that keeps its failure policy. Returns a warning ("" if none)."""
        from dtgui.launch.controller import RunController
        from dtgui.launch.watcher import start_watcher

        controller = self.source
        if not isinstance(controller, RunController) or controller.finished:
            return ""
        controller.detach()
        record = controller.record
        if record is None:  # the app records every run it starts; a watcher needs that record
            return ("The run keeps training, but it has no run record, so nothing will stop it "
                    "if a task fails while dtgui is closed.")
        given = self.connector.secrets.as_dict() if self.connector is not None else {}
        try:
            start_watcher(record, given, controller.policy.max_restarts)
        except OSError as exc:
            return (f"The run keeps training, but nothing will stop it if a task fails while "
                    f"dtgui is closed ({exc}). Reopen dtgui and reattach to watch it.")
        return ""

    # -- internals ---------------------------------------------------------------------------------
    def _connect(self, machines: list[Machine],
                 then: Callable[[PreConnected], None]) -> None:
        connect_machines(self._machines().flow, machines, ready=then,
                         failed=self._open_failed, progress=self.progress.emit)

    def _launcher(self, plan: Plan, root: Path, registered: dict[str, Machine],
                  connector: PreConnected, policy: RunPolicy) -> Callable[[Worker], Any]:
        from dtgui.launch.local_run import launch_plan
        from dtgui.launch.multihost import Target, launch_on_machines

        if all(t.is_local for t in plan.tasks):
            return lambda _worker: launch_plan(plan, root, policy=policy)
        gpus: dict[str, list[int]] = {}
        for task in plan.tasks:  # the GPUs chosen in the wizard, per machine, in task order
            gpus.setdefault(task.machine_name, []).extend(
                g for g in task.gpus if g not in gpus.get(task.machine_name, []))
        targets = [Target(name, None if name == "local" else registered[name],
                          plan.machines.get(name, {}).get("python", ""),
                          gpus=tuple(gpus.get(name, ())))
                   for name in plan.machine_names]
        placement = {t.task_id: t.machine_name for t in plan.tasks}

        def launch(worker: Worker) -> Any:
            def report(text: str, fraction: float) -> None:
                worker.report(f"{text}… ({fraction:.0%})")

            return launch_on_machines(plan, placement, targets, root, progress=report,
                                      policy=policy, connect=connector)

        return launch

    def _show(self, source: RunSource) -> None:
        self.busy = False
        self.source = source
        self.started.emit(source)

    def _reattached(self, source: RunSource) -> None:
        from dtgui.launch.history import RunView

        self._show(source)
        if isinstance(source, RunView):  # its watcher saw it end while dtgui was closed
            self.ended_while_closed.emit(source.record)

    def _failed(self, connector: PreConnected) -> Callable[[str], None]:
        def failed(text: str) -> None:
            run_in_thread(connector.close_unused, lambda _: None, lambda _: None)
            self._open_failed(text)

        return failed

    def _open_failed(self, text: str) -> None:
        self.busy = False
        self.failed.emit(text)
