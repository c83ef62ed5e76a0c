"""Starts the Qt application."""

from __future__ import annotations

import signal
import sys

from PySide6.QtCore import QTimer
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from dtgui.resources import resource


def make_app(argv: list[str] | None = None) -> QApplication:
    app = QApplication.instance() or QApplication(argv if argv is not None else sys.argv)
    app.setApplicationName("dtgui")
    app.setOrganizationName("dtgui")
    app.setWindowIcon(QIcon(str(resource("icons", "dtgui.svg"))))
    try:
        app.setStyleSheet(resource("style.qss").read_text(encoding="utf-8"))
    except OSError:
        pass  # unstyled is still usable
    return app


def run_gui() -> int:
    import pyqtgraph as pg

    pg.setConfigOptions(antialias=False, background="w", foreground="#374151")
    app = make_app()
    from dtgui.ui.main_window import MainWindow

    window = MainWindow()
    window.show()
    # Let Ctrl-C in the terminal close the window (Python signal handlers need the
    # interpreter to run now and then).
    signal.signal(signal.SIGINT, lambda *_: window.close())
    ticker = QTimer()
    ticker.start(300)
    ticker.timeout.connect(lambda: None)
    code = app.exec()
    del window
    return int(code)
