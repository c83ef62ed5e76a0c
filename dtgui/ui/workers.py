"""Running blocking work (subprocesses, disk, network) off the UI thread.

`run_in_thread(fn, on_done, on_error)` runs `fn()` in Qt's global thread pool and delivers
the result back on the UI thread through a queued signal. The UI thread never waits.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot


class _Relay(QObject):
    """Lives on the UI thread; signals emitted from the pool reach its slots queued."""

    done = Signal(object)
    error = Signal(str)

    def __init__(self, on_done: Callable[[Any], None], on_error: Callable[[str], None] | None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._on_done = on_done
        self._on_error = on_error
        self.done.connect(self._deliver_done)
        self.error.connect(self._deliver_error)

    @Slot(object)
    def _deliver_done(self, result: Any) -> None:
        _live_relays.discard(self)
        self._on_done(result)

    @Slot(str)
    def _deliver_error(self, text: str) -> None:
        _live_relays.discard(self)
        if self._on_error is not None:
            self._on_error(text)


class _Job(QRunnable):
    def __init__(self, fn: Callable[[], Any], relay: _Relay) -> None:
        super().__init__()
        self._fn = fn
        self._relay = relay
        self.setAutoDelete(True)

    @Slot()
    def run(self) -> None:
        try:
            result = self._fn()
        except Exception as exc:  # delivered to the UI as text; the app keeps running
            self._emit(self._relay.error, f"{exc}\n{traceback.format_exc(limit=4)}")
            return
        self._emit(self._relay.done, result)

    @staticmethod
    def _emit(signal: Any, value: Any) -> None:
        # The relay dies with its context object (a closed dialog): then nobody waits for
        # the result and it is dropped.
        with contextlib.suppress(RuntimeError):
            signal.emit(value)


_live_relays: set[_Relay] = set()


def run_in_thread(
    fn: Callable[[], Any],
    on_done: Callable[[Any], None],
    on_error: Callable[[str], None] | None = None,
    *,
    context: QObject | None = None,
) -> None:
    """Run `fn` in the thread pool; call `on_done(result)` or `on_error(text)` on the UI thread.

    With `context`, the callbacks are dropped if that object is destroyed first.
    """
    relay = _Relay(on_done, on_error, context)
    _live_relays.add(relay)
    QThreadPool.globalInstance().start(_Job(fn, relay))
