"""Starts the Qt application."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from dtgui.launch.checks.model_check import cancel_all as cancel_all_checks
from dtgui.resources import resource
from dtgui.ui.qt_start import StartMessages
from dtgui.ui.ui_thread_gc import collect_on_ui_thread
from dtgui.ui.workers import shutdown as shutdown_background_work


def make_app(argv: list[str] | None = None) -> QApplication:
    existing = QApplication.instance()
    if existing is not None and not isinstance(existing, QApplication):
        raise RuntimeError("a QCoreApplication without widgets is already running")
    if existing is None:
        with StartMessages():  # what to install when Qt cannot load its platform plugin
            existing = QApplication(argv if argv is not None else sys.argv)
    app = existing
    app.setApplicationName("dtgui")
    app.setOrganizationName("dtgui")
    app.setDesktopFileName("dtgui")  # ties the windows to dtgui.desktop (its icon and name)
    app.setWindowIcon(QIcon(str(resource("icons", "dtgui.svg"))))
    with contextlib.suppress(OSError):  # unstyled is still usable
        app.setStyleSheet(resource("style.qss").read_text(encoding="utf-8"))
    collect_on_ui_thread(app)
    return app


class _FirstPaintClock(QObject):
    """For the benchmark: print the wall time of the window's first paint, then quit."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._seen = False

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint and not self._seen:
            self._seen = True
            print(f"FIRST_PAINT {time.time():.6f}", flush=True)
            QTimer.singleShot(0, QApplication.quit)
        return False


def run_gui() -> int:
    app = make_app()
    from dtgui.ui.main_window import MainWindow

    window = MainWindow()
    if os.environ.get("DTGUI_BENCH_FIRST_PAINT"):
        clock = _FirstPaintClock(window)
        window.installEventFilter(clock)
    window.show()
    # Let Ctrl-C in the terminal close the window (Python signal handlers need the
    # interpreter to run now and then).
    signal.signal(signal.SIGINT, lambda *_: window.close())
    ticker = QTimer()
    ticker.start(300)
    ticker.timeout.connect(lambda: None)
    code = app.exec()
    cancel_all_checks()  # a TensorFlow probe still running must not outlive the app
    shutdown_background_work(5000)  # every pool, the plots' render thread too
    window.deleteLater()
    return int(code)
