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
running worker to stop and waits briefly for every pool; the interpreter's exit does the same
(a script or a test session that never called it). Work that ends after its application was
torn down is dropped where it ran (`on_dropped` releases its result): there is no UI thread
left to deliver to.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import shiboken6
from PySide6.QtCore import QCoreApplication, QObject, QRunnable, QThreadPool, Signal, Slot

log = logging.getLogger(__name__)
R = TypeVar("R")  # what a piece of work returns

_live: dict[int, Worker[Any]] = {}  # workers whose results are still to be delivered, by id
_live_lock = threading.Lock()
_ids = itertools.count(1)
_pools: dict[str, QThreadPool] = {}  # the dedicated pools, by name


def error_message(exc: BaseException) -> str:
    """The line to show a user for an exception from background work: the first line of its
    message (its type's name when it has none)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def error_details(exc: BaseException) -> str:
    """The exception with its traceback, for a details box or a log."""
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()


class _Relay(QObject):
    """The one QObject that work in the pools emits through. It lives on the UI thread for the
    whole session, so a pool thread never touches an object the UI thread may be deleting (a
    closed dialog, a plot torn down while its image was painted): the UI thread alone looks
    the worker up and checks that its context still exists."""

    delivered = Signal(int, str, object)  # worker id, "returned" | "errored" | "progressed", value

    def __init__(self) -> None:
        super().__init__()
        self.delivered.connect(self._deliver)

    @Slot(int, str, object)
    def _deliver(self, key: int, what: str, value: Any) -> None:
        with _live_lock:
            worker = _live.get(key)
            if worker is not None and what != "progressed":
                del _live[key]
        if worker is None:
            return
        if not worker.context_alive():
            if what == "returned" and worker.on_dropped is not None:
                _run_detached(worker.on_dropped, value)  # it may block (closing connections)
            return
        callback = {"returned": worker.on_done, "errored": worker.on_error,
                    "progressed": worker.on_progress}[what]
        if callback is not None:
            callback(value)
        elif what == "errored":
            log.error("background work failed", exc_info=value)


_relay: _Relay | None = None
EXIT_WAIT_MS = 3000  # how long the interpreter's exit waits for running work


def _the_relay() -> _Relay:
    """The relay, made by the first create_worker on the UI thread, and made again when the
    application that owned it was torn down (PySide deletes every QObject with it: a script's
    end, or one test's application after another's)."""
    global _relay
    if _relay is None or not shiboken6.isValid(_relay):
        if _relay is None:  # once: the work still running when the interpreter exits
            atexit.register(_drain_at_exit)  # runs before PySide's own teardown (LIFO)
        _relay = _Relay()
        app = QCoreApplication.instance()
        if app is not None and _relay.thread() is not app.thread():
            _relay.moveToThread(app.thread())  # deliveries run on the UI thread
    return _relay


def _drain_at_exit() -> None:
    """At the interpreter's exit: stop and wait for the work still running, so that none of
    it finishes while the application and the relay are being torn down."""
    if not shutdown(EXIT_WAIT_MS):
        log.warning("background work still running at exit was left behind")


class Worker(Generic[R]):
    """One piece of background work. The work runs on a pool thread; what it returns (an R),
    raises or reports reaches the callbacks on the UI thread, unless its context has been
    destroyed by then."""

    def __init__(self, fn: Callable[[Worker[R]], R], context: QObject | None = None) -> None:
        self._fn = fn
        self._context = context
        self._key = next(_ids)
        self.cancelled = threading.Event()
        self.on_done: Callable[[R], None] | None = None
        self.on_error: Callable[[BaseException], None] | None = None
        self.on_progress: Callable[[Any], None] | None = None
        self.on_dropped: Callable[[R], None] | None = None

    def start(self, pool: QThreadPool | None = None) -> Worker[R]:
        self._relay = _the_relay()
        with _live_lock:
            _live[self._key] = self
        (pool or QThreadPool.globalInstance()).start(_Job(self))
        return self

    def context_alive(self) -> bool:
        """On the UI thread: the context (if any) still exists."""
        return self._context is None or shiboken6.isValid(self._context)

    def report(self, value: Any) -> None:
        """From the work: hand `value` to `on_progress` (dropped if the context is gone)."""
        self._send("progressed", value)

    def cancel(self) -> None:
        """Ask the work to stop (it checks `cancelled`); its result is still delivered."""
        self.cancelled.set()

    def _run(self) -> None:  # on a pool thread
        try:
            result = self._fn(self)
        except BaseException as exc:  # delivered to the UI (with its traceback); the app goes on
            log.debug("background work failed", exc_info=exc)
            self._send("errored", exc)
            return
        self._send("returned", result)

    def _send(self, what: str, value: Any) -> None:  # on a pool thread
        """Hand the work's outcome to the relay; when the application (and the relay with it)
        is gone, nobody is left to deliver to: the outcome is dropped here, `on_dropped`
        releasing what a result holds."""
        relay = self._relay
        try:
            if shiboken6.isValid(relay):
                relay.delivered.emit(self._key, what, value)
                return
        except RuntimeError:  # deleted between the check and the emit
            pass
        if what == "progressed":
            return
        with _live_lock:
            _live.pop(self._key, None)
        if what == "returned" and self.on_dropped is not None:
            try:
                self.on_dropped(value)
            except Exception:  # the application is gone: nobody to tell but the log
                log.debug("releasing a dropped result failed", exc_info=True)


class _Job(QRunnable):
    def __init__(self, worker: Worker[Any]) -> None:
        super().__init__()
        self._worker = worker
        self.setAutoDelete(True)

    def run(self) -> None:
        self._worker._run()


def _run_detached(fn: Callable[[Any], None], value: Any) -> None:
    """Run `fn(value)` in the global pool with nobody waiting for it."""
    def work(_worker: Worker[None]) -> None:
        fn(value)

    Worker(work).start()


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
    fn: Callable[[Worker[R]], R],
    *,
    on_done: Callable[[R], None] | None = None,
    on_error: Callable[[BaseException], None] | None = None,
    on_progress: Callable[[Any], None] | None = None,
    on_dropped: Callable[[R], None] | None = None,
    context: QObject | None = None,
    pool: QThreadPool | None = None,
) -> Worker[R]:
    """Start `fn(worker)` in the thread pool (or `pool`); see the module's docstring."""
    worker = Worker(fn, context)
    worker.on_done, worker.on_error = on_done, on_error
    worker.on_progress, worker.on_dropped = on_progress, on_dropped
    return worker.start(pool)


def run_in_thread(
    fn: Callable[[], R],
    on_done: Callable[[R], None],
    on_error: Callable[[BaseException], None] | None = None,
    *,
    context: QObject | None = None,
) -> Worker[R]:
    """Run `fn()` in the thread pool; `on_done(result)` or `on_error(exception)` on the UI
    thread."""
    def work(_worker: Worker[R]) -> R:
        return fn()

    return create_worker(work, on_done=on_done, on_error=on_error, context=context)


def shutdown(wait_ms: int = 5000) -> bool:
    """At the application's exit: ask every running worker to stop, drop what the dedicated
    pools still have queued (images nobody will see) and wait up to `wait_ms` in all for every
    pool to finish. Work queued in the global pool still runs (a settings file written as the
    window closed). True if all finished."""
    for pool in _pools.values():  # first, or a cancelled piece would let the next one start
        pool.clear()
    with _live_lock:
        running = list(_live.values())
    for worker in running:
        worker.cancelled.set()
    pools = [*_pools.values(), QThreadPool.globalInstance()]
    deadline = time.monotonic() + wait_ms / 1000
    done = True
    for pool in pools:
        left = max(0, round((deadline - time.monotonic()) * 1000))
        done = pool.waitForDone(left) and done
    return done
