"""Python's cyclic garbage collection, on the UI thread only.

The collector runs in whichever thread happens to allocate past its threshold. When that is a
background worker (`dtgui.ui.workers`) and the garbage holds Qt wrappers of the UI thread's
objects, Qt objects get deleted off their thread, and the process can crash (seen: a
segmentation fault "Garbage-collecting" in a worker parsing a script). So automatic collection
is turned off and a timer on the UI thread collects instead, each generation when its count
passes the threshold Python would have used: pyqtgraph's `GarbageCollector` does the same; this
copy of the idea keeps pyqtgraph out of the window's first paint.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

INTERVAL_MS = 500


class UiThreadCollector(QObject):
    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.threshold = gc.get_threshold()
        gc.disable()
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.check)
        self.timer.start(INTERVAL_MS)

    def check(self) -> None:
        """Collect the oldest generation whose count passed its threshold (as Python would)."""
        counts = gc.get_count()
        for generation in (2, 1, 0):
            if counts[generation] > self.threshold[generation]:
                gc.collect(generation)
                return


_installed: list[UiThreadCollector] = []


def collect_on_ui_thread(app: QObject) -> UiThreadCollector:
    """Install the collector once, owned by the application object."""
    if not _installed:
        _installed.append(UiThreadCollector(app))
    return _installed[0]
