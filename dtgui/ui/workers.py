"""Running blocking work (subprocesses, disk, network) off the UI thread: the one way.

`create_worker(fn, on_done=..., on_error=..., on_progress=..., context=...)` runs
`fn(worker)` in Qt's global thread pool. What `fn` returns reaches `on_done` and what it
raises reaches `on_error` (as text), both on the UI thread; `worker.report(value)` from the
work reaches `on_progress` there; `worker.cancel()` sets `worker.cancelled` for the work to
look at. With `context`, nothing is delivered once that object is destroyed (a closed
dialog), and `on_dropped(result)` (run on the worker thread) can release what the result
holds. `run_in_thread(fn, on_done, on_error)` is the same for a `fn()` that needs none of
that. The UI thread never waits.
"""

from __future__ import annotations

import contextlib
import threading
import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot

_live: set[Worker] = set()  # workers whose results are still to be delivered


class Worker(QObject):
    """One piece of background work. Lives on the UI thread; the signals the work emits from
    the pool reach its slots queued, on the UI thread."""

    returned = Signal(object)
    errored = Signal(str)
    progressed = Signal(object)

    def __init__(self, fn: Callable[[Worker], Any], context: QObject | None = None) -> None:
        super().__init__(context)
        self._fn = fn
        self.cancelled = threading.Event()
        self.on_done: Callable[[Any], None] | None = None
        self.on_error: Callable[[str], None] | None = None
        self.on_progress: Callable[[Any], None] | None = None
        self.on_dropped: Callable[[Any], None] | None = None
        # Connected to this object's own slots: they run on its (the UI) thread, queued.
        self.returned.connect(self._deliver_result)
        self.errored.connect(self._deliver_error)
        self.progressed.connect(self._deliver_progress)

    def start(self) -> Worker:
        _live.add(self)
        QThreadPool.globalInstance().start(_Job(self))
        return self

    def report(self, value: Any) -> None:
        """From the work: hand `value` to `on_progress` (dropped if the context is gone)."""
        with contextlib.suppress(RuntimeError):
            self.progressed.emit(value)

    def cancel(self) -> None:
        """Ask the work to stop (it checks `cancelled`); its result is still delivered."""
        self.cancelled.set()

    @Slot(object)
    def _deliver_result(self, result: Any) -> None:
        _live.discard(self)
        if self.on_done is not None:
            self.on_done(result)

    @Slot(str)
    def _deliver_error(self, text: str) -> None:
        _live.discard(self)
        if self.on_error is not None:
            self.on_error(text)

    @Slot(object)
    def _deliver_progress(self, value: Any) -> None:
        if self.on_progress is not None:
            self.on_progress(value)

    def _run(self) -> None:  # on a pool thread
        try:
            result = self._fn(self)
        except Exception as exc:  # noqa: BLE001 - delivered to the UI as text; the app goes on
            self._emit(self.errored, f"{exc}\n{traceback.format_exc(limit=4)}")
            return
        if not self._emit(self.returned, result) and self.on_dropped is not None:
            self.on_dropped(result)

    @staticmethod
    def _emit(signal: Any, value: Any) -> bool:
        try:
            signal.emit(value)
        except RuntimeError:  # the context was destroyed: nobody waits for it any more
            return False
        return True


class _Job(QRunnable):
    def __init__(self, worker: Worker) -> None:
        super().__init__()
        self._worker = worker
        self.setAutoDelete(True)

    def run(self) -> None:
        self._worker._run()


def create_worker(
    fn: Callable[[Worker], Any],
    *,
    on_done: Callable[[Any], None] | None = None,
    on_error: Callable[[str], None] | None = None,
    on_progress: Callable[[Any], None] | None = None,
    on_dropped: Callable[[Any], None] | None = None,
    context: QObject | None = None,
) -> Worker:
    """Start `fn(worker)` in the thread pool; see the module's docstring."""
    worker = Worker(fn, context)
    worker.on_done, worker.on_error = on_done, on_error
    worker.on_progress, worker.on_dropped = on_progress, on_dropped
    return worker.start()


def run_in_thread(
    fn: Callable[[], Any],
    on_done: Callable[[Any], None],
    on_error: Callable[[str], None] | None = None,
    *,
    context: QObject | None = None,
) -> Worker:
    """Run `fn()` in the thread pool; `on_done(result)` or `on_error(text)` on the UI thread."""
    return create_worker(lambda _worker: fn(), on_done=on_done, on_error=on_error,
                         context=context)
