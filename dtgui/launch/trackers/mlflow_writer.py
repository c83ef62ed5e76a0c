"""The writer thread of runs into MLflow (docs/mlflow.md): what the trackers
(`dtgui.launch.trackers.mlflow_runs`) send is written here.

Nothing here blocks the caller: every write is an operation queued to the `MlflowWriter` of
the tracking URI, one thread a URI, which imports MLflow (seconds) and writes in order. A
write that fails because the store does not answer stays first in the queue and is tried
again (1 s, 2 s, ... up to 30 s apart); one the store refuses (a 4xx answer) is dropped and
said. While writes wait, the tracker's `note` says so, and the run's card shows it. At exit
the writers get DRAIN_SECONDS to send what is left. An export writes at once instead
(`DirectWriter`).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)
DRAIN_SECONDS = 15.0  # at exit: what is left is sent for this long at most
STUCK_SECONDS = 3.0  # a write with no answer for this long: the card says writes wait
RETRY_MAX_SECONDS = 30.0

Op = Callable[[Any], None]  # an operation on an MlflowClient


def _refused(exc: BaseException) -> bool:
    """The store answered and said no (a 4xx): trying again would give the same answer."""
    code = getattr(exc, "get_http_status_code", None)
    if callable(code):
        with contextlib.suppress(Exception):
            status = int(code())
            return 400 <= status < 500 and status != 429
    return False


class MlflowWriter:
    """The one thread that writes to one tracking URI, in order, retrying."""

    def __init__(self, uri: str, client_factory: Callable[[str], Any] | None = None) -> None:
        self.uri = uri
        self._factory = client_factory or _client
        self._ops: collections.deque[tuple[str, Op]] = collections.deque()
        self._cv = threading.Condition()
        self._busy = False
        self._busy_since = 0.0  # monotonic: when the write under way began
        self.failing_since: float | None = None  # monotonic: the first failure of the head
        self.last_error = ""
        self.refused = 0  # writes the store refused (dropped)
        self.cpu_seconds = 0.0  # this thread's CPU time writing (what logging costs)
        self._thread = threading.Thread(target=self._loop, name="dtgui-mlflow", daemon=True)
        self._thread.start()

    def submit(self, what: str, op: Op) -> None:
        with self._cv:
            self._ops.append((what, op))
            self._cv.notify_all()

    @property
    def queued(self) -> int:
        with self._cv:
            return len(self._ops) + int(self._busy)

    def drain(self, timeout: float, *, while_answering: bool = False) -> bool:
        """Wait until every queued write is done (True) or `timeout` has passed; with
        `while_answering`, only while the store answers (at exit: a store that does not
        answer keeps nobody waiting)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while self._ops or self._busy:
                left = deadline - time.monotonic()
                if left <= 0 or (while_answering and self._stuck()):
                    return False
                self._cv.wait(min(left, 0.2))
        return True

    def _stuck(self) -> bool:
        """The head write failed, or has had no answer for STUCK_SECONDS (MLflow's own
        client retries a request several times before it gives up)."""
        return self.failing_since is not None or (
            self._busy and time.monotonic() - self._busy_since > STUCK_SECONDS)

    def discard(self) -> None:
        """Drop every queued write (a store given up on)."""
        with self._cv:
            self._ops.clear()
            self._cv.notify_all()

    def _loop(self) -> None:
        client = None
        delay = 1.0
        while True:
            with self._cv:
                while not self._ops:
                    self._cv.wait()
                what, op = self._ops[0]
                self._busy = True
                # importing MLflow first (seconds) is no wait on the store
                self._busy_since = time.monotonic() if client is not None else float("inf")
            cpu = time.thread_time()
            try:
                if client is None:
                    client = self._factory(self.uri)  # imports MLflow: not a wait on the store
                    with self._cv:
                        self._busy_since = time.monotonic()
                op(client)
            except Exception as exc:  # noqa: BLE001 - any failure is retried or said
                self.cpu_seconds += time.thread_time() - cpu
                message = f"{what}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                if client is not None and _refused(exc):
                    log.warning("MLflow refused %s", message)
                    with self._cv:
                        self._ops.popleft()
                        self.refused += 1
                        self.last_error = message[:300]
                        self._busy = False
                        self._cv.notify_all()
                    continue
                log.info("MLflow write failed (retrying): %s", message)
                with self._cv:
                    self._busy = False
                    if self.failing_since is None:
                        self.failing_since = time.monotonic()
                    self.last_error = message[:300]
                    self._cv.notify_all()
                time.sleep(delay)
                delay = min(RETRY_MAX_SECONDS, delay * 2)
                continue
            self.cpu_seconds += time.thread_time() - cpu
            delay = 1.0
            with self._cv:
                self._ops.popleft()
                self._busy = False
                self.failing_since = None
                self._cv.notify_all()

    def note(self) -> str:
        """What the card says: writes waiting on a store that does not answer, refusals."""
        with self._cv:
            waiting = len(self._ops)
            stuck = self._stuck()
            since = self.failing_since if self.failing_since is not None else self._busy_since
            refused, error = self.refused, self.last_error
        if stuck:
            seconds = time.monotonic() - since
            if self.failing_since is not None:
                return f"MLflow: {waiting} write(s) waiting, retrying for {seconds:.0f} s ({error})"
            return f"MLflow: {waiting} write(s) waiting, no answer for {seconds:.0f} s"
        if refused:
            return f"MLflow refused {refused} write(s): {error}"
        return ""


def _client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient  # seconds to import: on the writer's thread

    return MlflowClient(tracking_uri=uri)


_writers: dict[str, MlflowWriter] = {}
_writers_lock = threading.Lock()


def writer_for(uri: str) -> MlflowWriter:
    """The process's writer for `uri` (made the first time)."""
    with _writers_lock:
        found = _writers.get(uri)
        if found is None:
            if not _writers:
                atexit.register(drain_all)
            found = _writers[uri] = MlflowWriter(uri)
        return found


def drain_all(timeout: float = DRAIN_SECONDS, *, while_answering: bool = True) -> bool:
    """Send what is queued (at exit, and before a command ends): True when all was sent."""
    deadline = time.monotonic() + timeout
    with _writers_lock:
        writers = list(_writers.values())
    return all([w.drain(max(0.0, deadline - time.monotonic()), while_answering=while_answering)
                for w in writers])


class DirectWriter(MlflowWriter):
    """Writes at once on the caller's thread and raises what fails (an export: the person
    waits for it and reads why it failed)."""

    def __init__(self, uri: str) -> None:  # no thread
        self.uri = uri
        self.client = _client(uri)
        self.failing_since = None
        self.last_error = ""
        self.refused = 0

    def submit(self, what: str, op: Op) -> None:
        op(self.client)

    @property
    def queued(self) -> int:
        return 0

    def note(self) -> str:
        return ""


