"""Running blocking work (subprocesses, disk, network, painting) off the UI thread: the one way.

`create_worker(fn, on_done=..., on_error=..., on_progress=..., context=..., pool=...)` runs
`fn(worker)` in a thread pool (Qt's global one unless `pool` names another). What `fn`
returns reaches `on_done` and the exception it raises reaches `on_error` (the exception
itself, its traceback on it), both on the UI thread; `error_message(exc)` is the line to
show a user, `error_details(exc)` the whole traceback. `worker.report(value)` from the
work reaches `on_progress` there; `worker.cancel()` sets `worker.cancelled` for the work
to look at. With `context`, nothing is delivered once that object is destroyed (a closed
dialog), and `on_dropped(result)` (run on the worker thread) can release what the result
holds. `run_in_thread(fn, on_done, on_error)` is the same for a `fn()` that needs none of
that. The UI thread never waits.

`dedicated_pool(name)` is a pool of one thread for one kind of work that must not queue
behind the rest (the plots' painting). `shutdown()` at the application's exit asks every
running worker to stop and waits briefly for every pool.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot

log = logging.getLogger(__name__)

_live: set[Worker] = set()  # workers whose results are still to be delivered
_pools: dict[str, QThreadPool] = {}  # the dedicated pools, by name


def error_message(exc: BaseException) -> str:
    """The line to show a user for an exception from background work: the first line of its
    message (its type's name when it has none)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def error_details(exc: BaseException) -> str:
    """The exception with its traceback, for a details box or a log."""
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()


class Worker(QObject):
    """One piece of background work. Lives on the UI thread; the signals the work emits from
    the pool reach its slots queued, on the UI thread."""

    returned = Signal(object)
    errored = Signal(object)  # the BaseException the work raised
    progressed = Signal(object)

    def __init__(self, fn: Callable[[Worker], Any], context: QObject | None = None) -> None:
        super().__init__(context)
        self._fn = fn
        self.cancelled = threading.Event()
        self.on_done: Callable[[Any], None] | None = None
        self.on_error: Callable[[BaseException], None] | None = None
        self.on_progress: Callable[[Any], None] | None = None
        self.on_dropped: Callable[[Any], None] | None = None
        # Connected to this object's own slots: they run on its (the UI) thread, queued.
        self.returned.connect(self._deliver_result)
        self.errored.connect(self._deliver_error)
        self.progressed.connect(self._deliver_progress)

    def start(self, pool: QThreadPool | None = None) -> Worker:
        _live.add(self)
        (pool or QThreadPool.globalInstance()).start(_Job(self))
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
        self.deleteLater()  # delivered: nothing more comes (a context may outlive many)
        if self.on_done is not None:
            self.on_done(result)

    @Slot(object)
    def _deliver_error(self, exc: BaseException) -> None:
        _live.discard(self)
        self.deleteLater()
        if self.on_error is not None:
            self.on_error(exc)
        else:
            log.error("background work failed", exc_info=exc)

    @Slot(object)
    def _deliver_progress(self, value: Any) -> None:
        if self.on_progress is not None:
            self.on_progress(value)

    def _run(self) -> None:  # on a pool thread
        try:
            result = self._fn(self)
        except BaseException as exc:  # delivered to the UI (with its traceback); the app goes on
            log.debug("background work failed", exc_info=exc)
            if not self._emit(self.errored, exc):
                _live.discard(self)
            return
        if not self._emit(self.returned, result):
            _live.discard(self)
            if self.on_dropped is not None:
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


def dedicated_pool(name: str) -> QThreadPool:
    """The pool of one thread named `name` (made at first use): its work runs one piece at a
    time, apart from the global pool's; `shutdown()` drains it with the others."""
    pool = _pools.get(name)
    if pool is None:
        pool = QThreadPool()
        pool.setObjectName(name)
        pool.setMaxThreadCount(1)
        _pools[name] = pool
    return pool


def allow_threads(count: int) -> None:
    """Let the global pool run at least `count` pieces of work at once: work that waits on
    the network rather than the CPU (SSH), so a slow machine never holds up a save or a probe
    of this machine."""
    pool = QThreadPool.globalInstance()
    if pool.maxThreadCount() < count:
        pool.setMaxThreadCount(count)


def create_worker(
    fn: Callable[[Worker], Any],
    *,
    on_done: Callable[[Any], None] | None = None,
    on_error: Callable[[BaseException], None] | None = None,
    on_progress: Callable[[Any], None] | None = None,
    on_dropped: Callable[[Any], None] | None = None,
    context: QObject | None = None,
    pool: QThreadPool | None = None,
) -> Worker:
    """Start `fn(worker)` in the thread pool (or `pool`); see the module's docstring."""
    worker = Worker(fn, context)
    worker.on_done, worker.on_error = on_done, on_error
    worker.on_progress, worker.on_dropped = on_progress, on_dropped
    return worker.start(pool)


def run_in_thread(
    fn: Callable[[], Any],
    on_done: Callable[[Any], None],
    on_error: Callable[[BaseException], None] | None = None,
    *,
    context: QObject | None = None,
) -> Worker:
    """Run `fn()` in the thread pool; `on_done(result)` or `on_error(exception)` on the UI
    thread."""
    return create_worker(lambda _worker: fn(), on_done=on_done, on_error=on_error,
                         context=context)


def shutdown(wait_ms: int = 5000) -> bool:
    """At the application's exit: ask every running worker to stop, drop what the dedicated
    pools still have queued (images nobody will see) and wait up to `wait_ms` in all for every
    pool to finish. Work queued in the global pool still runs (a settings file written as the
    window closed). True if all finished."""
    for worker in list(_live):
        worker.cancelled.set()
    for pool in _pools.values():
        pool.clear()
    pools = [*_pools.values(), QThreadPool.globalInstance()]
    deadline = time.monotonic() + wait_ms / 1000
    done = True
    for pool in pools:
        left = max(0, round((deadline - time.monotonic()) * 1000))
        done = pool.waitForDone(left) and done
    return done
