"""A sweep's life, as `RunSession` is a run's: start, follow, go on, stop; what happens to it
said as typed signals (docs/sweeps.md).

One `SweepSession` holds one sweep's folder. Its queue runs in a process of its own
(`start`, `resume`: `dtgui.launch.sweeps.sweep_process`, which goes on while dtgui is closed) or in
the app (`run_here`: on a thread of its own, stopped when the app quits); `follow` follows a sweep
whoever runs it. Either way the session follows it the same way, as the watcher's run is
followed: by reading what the queue writes (its study) in a background worker
(`dtgui.ui.workers`) every second, and saying what changed since the last look
(`dtgui.core.sweeps.sweep_life.changes`) once, as the signals below, in the order it happened. The
sweep view subscribes; it never reads the sweep itself. Nothing here waits on the UI thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QObject, QTimer, Signal

from dtgui.core.plans.plan import Plan
from dtgui.core.sweeps.sweep import SweepSpec
from dtgui.core.sweeps.sweep_life import Change, SweepEvent, SweepLook, changes
from dtgui.core.sweeps.sweep_study import SweepTable, read_sweep
from dtgui.launch.sweeps import sweep_process
from dtgui.ui.workers import Worker, create_worker, dedicated_pool, error_message

FOLLOW_MS = 1000  # how often the sweep is read while its queue runs
QUEUE_POOL = "sweep-queue"  # the thread a sweep run in the app takes

# a read of the sweep: its look, the pid of its process (None: not running), its news
Looked = tuple[SweepLook, int | None, list[SweepEvent]]


class SweepSession(QObject):
    """Starts, follows, goes on with or stops one sweep, and says what happens to it."""

    trialStarted = Signal(int)  # trial number
    trialReported = Signal(int, int, float)  # trial, step, value told the pruner
    trialPruned = Signal(int)  # trial: its pruner stopped it
    trialEnded = Signal(int, str)  # trial, its end: finished | pruned | failed
    sweepEnded = Signal()  # its queue no longer runs (once a follow, after its trials' ends)
    changed = Signal(object)  # SweepTable: the sweep as last read, when anything changed
    started = Signal(int)  # the pid of the sweep's process (0: its queue runs in the app)
    failed = Signal(str)  # the sweep cannot be started, gone on with, stopped or read: why

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.folder: Path | None = None
        self.table: SweepTable | None = None
        self.process: int | None = None  # the pid of the sweep's process while it runs
        self._look: SweepLook | None = None  # the last look, what the next is compared with
        self._reading: Worker[Looked] | None = None
        self._here: threading.Event | None = None  # set when the queue run in the app ends
        self._stop_here: Callable[[], None] | None = None
        self._timer = QTimer(self)
        self._timer.setInterval(FOLLOW_MS)
        self._timer.timeout.connect(self._read)

    # -- state -----------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """Its queue ran at the last look (its process, or in the app)."""
        return self._look is not None and self._look.running

    @property
    def following(self) -> bool:
        return self._timer.isActive()

    # -- starting and stopping -------------------------------------------------------------
    def start(self, folder: Path, spec: SweepSpec, plan: Plan) -> None:
        """Check the sweep, write its folder and start its process; then follow it."""
        self._begin(folder)
        create_worker(lambda _w: sweep_process.start_sweep(folder, spec, plan),
                      on_done=self._started, on_error=self._failed, context=self)

    def resume(self, trials: int) -> None:
        """Go on with the sweep up to `trials` in all, in its own process again."""
        folder = self.folder
        if folder is None:
            return
        create_worker(lambda _w: sweep_process.resume_sweep(folder, trials),
                      on_done=self._started, on_error=self._failed, context=self)

    def run_here(self, folder: Path, spec: SweepSpec, plan: Plan) -> None:
        """Run the sweep's queue in the app (stopped when the app quits); follow it."""
        from dtgui.launch.sweeps.sweep_queue import SweepQueue

        self._begin(folder)
        done = threading.Event()
        self._here = done
        stop = threading.Event()
        self._stop_here = stop.set

        def run(_w: Worker[None]) -> None:
            try:
                queue = SweepQueue.new(folder, spec, plan)
                self._stop_here = queue.request_stop
                if stop.is_set():  # asked while the queue was being made
                    queue.request_stop()
                queue.run()
            finally:
                done.set()

        create_worker(run, on_error=self._failed, context=self,
                      pool=dedicated_pool(QUEUE_POOL))
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.stop)
        self.started.emit(0)
        self.follow(folder)

    def stop(self) -> None:
        """Stop the running trials and start no more (the sweep ends; `sweepEnded` says
        when)."""
        if self._stop_here is not None and self._here is not None and not self._here.is_set():
            self._stop_here()
            return
        folder = self.folder
        if folder is not None:
            create_worker(lambda _w: sweep_process.stop_sweep(folder), on_error=self._failed,
                          context=self)

    # -- following -------------------------------------------------------------------------
    def follow(self, folder: Path) -> None:
        """Follow the sweep in `folder` (another one than before: from its beginning)."""
        if self.folder != Path(folder):
            self._begin(folder)
        elif self.table is not None:  # shown again: what is known, before the next look
            self.changed.emit(self.table)
        self._timer.start()
        self._read()

    def unfollow(self) -> None:
        self._timer.stop()

    def _begin(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.table = None
        self.process = None
        self._look = None
        self._here = None
        self._stop_here = None

    def _running(self, folder: Path) -> Callable[[], int | None]:
        """What says whether the queue runs: its process's pid, or 0 while it runs here."""
        here = self._here
        if here is not None:
            return lambda: None if here.is_set() else 0
        return lambda: sweep_process.sweep_pid(folder)

    def _read(self) -> None:
        folder = self.folder
        if folder is None or self._reading is not None:
            return
        before = self._look
        running = self._running(folder)

        def look(_w: Worker[Looked]) -> Looked:
            # whether it runs first: a queue that ended after this has its trials' ends in
            # the table read next, so its end is never said before theirs
            pid = running()
            now = SweepLook(read_sweep(folder), pid is not None)
            return now, pid, changes(before, now)

        self._reading = create_worker(look, on_done=self._looked(folder),
                                      on_error=self._unreadable(folder), context=self)

    def _looked(self, folder: Path) -> Callable[[tuple[SweepLook, int | None,
                                                       list[SweepEvent]]], None]:
        def looked(result: tuple[SweepLook, int | None, list[SweepEvent]]) -> None:
            self._reading = None
            if folder != self.folder:
                return  # another sweep is followed now
            look, pid, events = result
            self._look = look
            self.process = pid or None
            new_table = self.table is None or self.table != look.table
            self.table = look.table
            if not look.running:
                self._timer.stop()
            if new_table or events:
                self.changed.emit(look.table)
            for event in events:
                self._say(event)

        return looked

    def _say(self, event: SweepEvent) -> None:
        if event.change is Change.TRIAL_STARTED:
            self.trialStarted.emit(event.trial)
        elif event.change is Change.TRIAL_REPORTED:
            self.trialReported.emit(event.trial, event.step or 0, event.value or 0.0)
        elif event.change is Change.TRIAL_PRUNED:
            self.trialPruned.emit(event.trial)
        elif event.change is Change.TRIAL_ENDED:
            self.trialEnded.emit(event.trial, event.state)
        else:
            self.sweepEnded.emit()

    def _unreadable(self, folder: Path) -> Callable[[BaseException], None]:
        def unreadable(exc: BaseException) -> None:
            self._reading = None
            if folder != self.folder:
                return
            if self.table is None and self._here is not None:
                if self._here.is_set():  # the queue could not start: `failed` said why
                    self._timer.stop()
                return  # else its study is being written
            if self.table is None:  # not a sweep: no use reading it again
                self._timer.stop()
            self.failed.emit(f"The sweep cannot be read: {error_message(exc)}")

        return unreadable

    def _started(self, pid: int) -> None:
        self.process = pid
        self.started.emit(pid)
        if self.folder is not None:
            if self._look is not None:  # gone on with: the ended sweep runs again
                self._look = SweepLook(self._look.table, True)
            self.follow(self.folder)

    def _failed(self, exc: BaseException) -> None:
        self.failed.emit(error_message(exc))
