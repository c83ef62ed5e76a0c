"""What to do when Qt cannot open its window: Qt aborts the process (qFatal) when its platform
plugin does not load, and its own words name neither the missing system libraries nor the
command that installs them. A message handler, installed while the QApplication is made, adds
that line to Qt's messages before the abort.
"""

from __future__ import annotations

import os
import sys

from PySide6.QtCore import QMessageLogContext, QtMsgType, qInstallMessageHandler

from dtgui.resources import resource

NO_PLUGIN = 'Could not load the Qt platform plugin "xcb"'
NO_DISPLAY = "could not connect to display"


def debian_packages() -> list[str]:
    """The system libraries Qt's xcb plugin needs, as Debian and Ubuntu name them
    (packaging/dev.sh installs the same list)."""
    text = resource("qt-debian-packages.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]


def start_hint(messages: list[str]) -> str:
    """What to do, from Qt's messages so far ("" while none says the xcb plugin failed)."""
    if not any(NO_PLUGIN in m for m in messages):
        return ""
    if any(NO_DISPLAY in m for m in messages):
        display = os.environ.get("DISPLAY", "")
        return (f"dtgui: no X display at DISPLAY={display!r}. Run it on a desktop, with "
                "ssh -X, or on a virtual screen: xvfb-run -a dtgui")
    return ("dtgui: Qt's xcb plugin needs system libraries that are missing. On Debian or "
            "Ubuntu, install them with:\n  sudo apt-get install "
            + " ".join(debian_packages()))


class StartMessages:
    """While installed (a context manager): Qt's messages written as Qt writes them, and
    `start_hint`'s line once they say the platform plugin failed."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.hinted = False

    def __enter__(self) -> StartMessages:
        qInstallMessageHandler(self._handle)
        return self

    def __exit__(self, *_exc: object) -> None:
        qInstallMessageHandler(None)  # Qt's own output again

    def _handle(self, _kind: QtMsgType, context: QMessageLogContext, message: str) -> None:
        category = context.category
        line = f"{category}: {message}" if category and category != "default" else message
        print(line, file=sys.stderr, flush=True)
        self.messages.append(message)
        hint = "" if self.hinted else start_hint(self.messages)
        if hint:
            self.hinted = True
            print(hint, file=sys.stderr, flush=True)
