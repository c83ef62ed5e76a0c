"""The run the window shows, whatever kind it is: launch, reattach, resume, open, stop, keep
training.

One `RunSession` owns the shown run (a `dtgui.launch.runs.run_source.RunSource`): a live
`RunController` (tasks on this machine, on registered machines, or both: the controller does
not care) or a `RunView` (a run that has ended, from the history). It is the one place that
follows the run's life: a timer of its own reads the run's state (in memory) and says each
change once, as typed signals (`stateChanged`, `restarted`, `ended`). The dashboard, the
notifications and the main window subscribe; none of them watches the run for its end, and
the session never asks which kind of run it holds. Everything that blocks (SSH, disk,
processes) runs in background workers; remote machines are connected first through the
Machines panel's dialogs (host keys, passwords).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer, Signal

from dtgui.core.machines.registry import Machine
from dtgui.core.plans.plan import Plan, is_local_machine
from dtgui.core.runs.records import RunRecord
from dtgui.core.target_job import TargetJob
from dtgui.launch.runs.policy import RunPolicy
from dtgui.launch.runs.run_source import RunSource
from dtgui.remote.connector import Connector
from dtgui.ui.launch_connect import connect_machines
from dtgui.ui.workers import Worker, create_worker, error_message, run_in_thread

if TYPE_CHECKING:
    from dtgui.launch.controller import RunController
    from dtgui.ui.machines.panel import MachinesPanel

LIFE_MS = 100  # how often the followed run's state is read (memory only: nothing blocks)


class RunLife(QObject):
    """A run's life as its listeners hear it: a session's run, or the shown run of the
    window's sessions (`RunSessions` tells it the same way, so that the dashboard listens to
    either alike); `machines()` is the Machines panel that connects its machines (None: runs
    on this machine only, as in tests)."""

    stateChanged = Signal(str, str)  # state, message: as followed from, then once per change
    ended = Signal(str, str)  # final state, message: once, when a run followed live ends
    progress = Signal(str)  # what a launch or reattach is doing
    failed = Signal(str)  # a launch, reattach or open could not be done: why
    endedWhileClosed = Signal(object)  # RunRecord of a run that ended while dtgui was closed

    def __init__(self, machines: Callable[[], MachinesPanel] | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._machines = machines


class RunSession(RunLife):
    """Launches, reattaches to or opens one run at a time and says what happens to it."""

    started = Signal(object)  # RunSource: the run to show now
    restarted = Signal(int)  # restarts so far: once per restart from the last checkpoint

    def __init__(self, machines: Callable[[], MachinesPanel] | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(machines, parent)
        self.source: RunSource | None = None
        self.connector: Connector | None = None  # the shown run's SSH connections
        self.busy = False  # a launch or reattach is under way
        self._following = False  # the shown run is live: its changes are told
        self._said = ("", "")  # the state and message last told
        self._restarts = 0  # the restarts last told
        self._life = QTimer(self)
        self._life.setInterval(LIFE_MS)
        self._life.timeout.connect(self._read_life)

    # -- state -------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        """A run is shown and still training (or stopping)."""
        return self.source is not None and not self.source.finished

    @property
    def message(self) -> str:
        return self.source.message if self.source is not None else ""

    @property
    def following(self) -> bool:
        """The shown run's changes (state, restarts, its end) are still to be told."""
        return self._following

    # -- starting a run ------------------------------------------------------------------------
    def launch(self, plan: Plan, root: Path, policy: RunPolicy,
               job: TargetJob | None = None) -> None:
        """Write the bundle and start every task (remote machines are connected first); with
        `job` (what the wizard's box of a kind made, e.g. a Slurm job), the tasks run on the
        target its driver makes of it (`chosen_targets`)."""
        names = [n for n in plan.machine_names if not is_local_machine(n)]
        # a run on this machine alone needs no machines panel (paramiko, the keyring)
        registered = {m.name: m for m in self._panel().machines()} if names else {}
        missing = [n for n in names if n not in registered]
        if missing:
            self.failed.emit(f"{', '.join(missing)} is no longer a registered machine: add it "
                             "again under Machines, or choose other machines in the wizard.")
            return
        self.busy = True

        def start(connector: Connector) -> None:
            self.connector = connector
            self.progress.emit("Connected; checking each machine" if names
                               else f"Writing the bundle and starting {plan.run_name}")
            create_worker(self._launcher(plan, root, registered, connector, policy, job),
                          on_done=self._launched, on_error=self._failed(connector),
                          on_progress=self.progress.emit, context=self)

        connected = [registered[n] for n in names if registered[n].over_ssh]  # its kind says
        if connected:
            self._connect(connected, start)
        else:
            start(Connector())

    def reattach(self, record: RunRecord) -> None:
        """Take a run that kept training while dtgui was closed back from its watcher."""
        from dtgui.launch.drivers import Refused, connected_machines
        from dtgui.launch.runs.history import open_run
        from dtgui.launch.start.pipeline import reattach
        from dtgui.launch.start.watcher import stop_watcher

        panel = self._panel()
        registry = panel.registry
        try:  # what each recorded machine's kind connects to
            machines = connected_machines(record, registry)
        except Refused as exc:
            self._open_failed(f"Cannot reattach: {exc}")
            return
        self.busy = True
        self.progress.emit(f"Reattaching to {record.run_name}")

        def take_back(connector: Connector) -> tuple[RunSource, bool]:
            """The run, and whether it is still live."""
            # the watcher that kept the policy while dtgui was closed hands the run back
            if not stop_watcher(record):
                raise RuntimeError("The run's watcher is restarting or stopping its tasks "
                                   "right now: try Reattach again in a moment.")
            fresh = RunRecord.load(Path(record.bundle))  # it may have ended or restarted it
            if not fresh.is_active:
                connector.close_unused()
                return open_run(fresh), False
            return reattach(fresh, connect=connector, registry=registry), True

        def start(connector: Connector) -> None:
            self.connector = connector
            run_in_thread(lambda: take_back(connector), self._reattached,
                          self._failed(connector), context=self)

        self._connect(machines, start)

    def resume(self, run_dir: Path, steps: int | None = None) -> None:
        """Resume the ended run in `run_dir` (its folder under the runs directory) from its
        newest checkpoint, on its own machines, to `steps` (None: its plan's): the same run
        goes on, shown and followed live (`started`); a refusal comes as `failed`, with what
        to do (`dtgui.launch.start.resume.resume_run`)."""
        self.busy = True
        self.progress.emit(f"Resuming {Path(run_dir).name}")
        run_in_thread(lambda: RunRecord.load(Path(run_dir)),
                      lambda record: self._resume_on(record, steps),
                      lambda exc: self._open_failed(
                          f"{run_dir} holds no run record to resume ({error_message(exc)})."),
                      context=self)

    def _resume_on(self, record: RunRecord, steps: int | None) -> None:
        """Connect the run's machines (host keys, passwords asked here), then resume it."""
        from dtgui.launch.drivers import Refused, connected_machines
        from dtgui.launch.start.resume import resume_run

        remote = [rec for rec in record.machines if not rec.is_local]
        registry = self._panel().registry if remote else None
        try:  # what each recorded machine's kind connects to
            machines = connected_machines(record, registry)
        except Refused as exc:
            self._open_failed(f"Not resumed: {exc}")
            return

        def start(connector: Connector) -> None:
            self.connector = connector

            def resume(worker: Worker[RunController]) -> RunController:
                def report(text: str, fraction: float) -> None:
                    worker.report(f"{text}… ({fraction:.0%})")

                return resume_run(record, steps=steps, connect=connector, registry=registry,
                                  progress=report)

            create_worker(resume, on_done=self._launched, on_error=self._failed(connector),
                          on_progress=self.progress.emit, context=self)

        if machines:
            self._connect(machines, start)
        else:
            start(Connector())

    def open(self, record: RunRecord) -> None:
        """Show an ended run from the history (read from its local bundle)."""
        from dtgui.launch.runs.history import open_run

        self.busy = True
        run_in_thread(lambda: open_run(record), lambda view: self._show(view, live=False),
                      lambda exc: self._open_failed(error_message(exc)), context=self)

    def show(self, source: RunSource) -> None:
        """Show a run made elsewhere; one still going is followed to its end."""
        self._show(source, live=not source.finished)

    # -- a shown run -----------------------------------------------------------------------------
    def request_stop(self) -> None:
        if self.source is not None:
            self.source.request_stop()

    def keep_training(self) -> str:
        """Let the active run go on without dtgui: stop following it and hand it to a
        headless watcher that keeps its failure policy. Returns a warning ("" if none)."""
        from dtgui.launch.start.watcher import start_watcher

        source = self.source
        if source is None or source.finished:
            return ""
        self._unfollow()  # its tasks go on: it has not ended
        source.detach()
        record = source.record
        if record is None:  # the app records every run it starts; a watcher needs that record
            return ("The run keeps training, but it has no run record, so nothing will stop it "
                    "if a task fails while dtgui is closed.")
        given = self.connector.secrets.as_dict() if self.connector is not None else {}
        try:
            start_watcher(record, given, source.max_restarts)
        except OSError as exc:
            return (f"The run keeps training, but nothing will stop it if a task fails while "
                    f"dtgui is closed ({exc}). Reopen dtgui and reattach to watch it.")
        return ""

    # -- the run's life ------------------------------------------------------------------------
    def _follow(self, source: RunSource) -> None:
        self._said = (source.state, source.message)
        self._restarts = source.restarts
        self._following = True
        self._life.start()

    def _unfollow(self) -> None:
        self._life.stop()
        self._following = False

    def _read_life(self) -> None:
        """One look at the followed run: each change is told once."""
        source = self.source
        if source is None or not self._following:
            self._unfollow()
            return
        finished = source.finished  # first: an ended run's state and message are final
        restarts = source.restarts
        now = (source.state, source.message)
        if restarts > self._restarts:
            self._restarts = restarts
            self.restarted.emit(restarts)
        if now != self._said:
            self._said = now
            self.stateChanged.emit(*now)
        if finished:
            self._unfollow()
            self.ended.emit(*now)

    # -- internals ---------------------------------------------------------------------------------
    def _panel(self) -> MachinesPanel:
        if self._machines is None:
            raise RuntimeError("this session has no machines panel: it runs on this machine only")
        return self._machines()

    def _connect(self, machines: list[Machine],
                 then: Callable[[Connector], None]) -> None:
        connect_machines(self._panel().flow, machines, ready=then,
                         failed=self._open_failed, progress=self.progress.emit)

    def _launcher(self, plan: Plan, root: Path, registered: dict[str, Machine],
                  connector: Connector, policy: RunPolicy,
                  job: TargetJob | None) -> Callable[[Worker[RunController]], RunController]:
        """The launch of `plan` on the targets the wizard chose (`job`: what the box of a
        kind made, a Slurm job; None: the plan's machines)."""
        from dtgui.launch.drivers import chosen_targets
        from dtgui.launch.start.pipeline import launch_plan

        targets = chosen_targets(plan, registered, job)

        def launch(worker: Worker[RunController]) -> RunController:
            def report(text: str, fraction: float) -> None:
                worker.report(f"{text}… ({fraction:.0%})")

            return launch_plan(plan, root, targets=targets, connect=connector, policy=policy,
                               progress=report)

        return launch

    def _show(self, source: RunSource, live: bool) -> None:
        """Show `source`; a live run (even one that ended a moment ago) is followed until its
        end is told."""
        self._unfollow()
        self.busy = False
        self.source = source
        if live:
            self._follow(source)
        self.started.emit(source)
        if live and self._following and self.source is source:
            # the run moves while the listeners take it (its first poll may land meanwhile):
            # what they read then is replaced by the session's own look, the one each later
            # look is compared with, so that no change between the two goes untold
            self.stateChanged.emit(*self._said)

    def _launched(self, source: RunSource) -> None:
        self._show(source, live=True)

    def _reattached(self, taken: tuple[RunSource, bool]) -> None:
        source, live = taken
        self._show(source, live=live)
        if not live and source.record is not None:  # its watcher saw it end
            self.endedWhileClosed.emit(source.record)

    def _failed(self, connector: Connector) -> Callable[[BaseException], None]:
        def failed(exc: BaseException) -> None:
            run_in_thread(connector.close_unused, lambda _: None, lambda _: None)
            self._open_failed(error_message(exc))

        return failed

    def _open_failed(self, text: str) -> None:
        self.busy = False
        self.failed.emit(text)
