"""`dtgui install-desktop`: dtgui in the desktop's application menu, for the current user."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dtgui.core.desktop import install_desktop, xdg_data_home


def add_install_desktop(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub.add_parser(
        "install-desktop",
        help="add dtgui to the application menu (a desktop entry and an icon under "
        "$XDG_DATA_HOME, default ~/.local/share)",
        description="Writes dtgui.desktop to $XDG_DATA_HOME/applications and the icon to "
        "$XDG_DATA_HOME/icons/hicolor/scalable/apps (default ~/.local/share). The entry "
        "starts this dtgui, wherever it is installed (a venv included).",
    )


def launcher() -> list[str]:
    """How to start this dtgui: the `dtgui` script beside this interpreter (pip puts it
    there), else the interpreter itself with `-m dtgui`. Not resolved: a venv's python is a
    link whose target is outside the venv."""
    script = Path(sys.executable).with_name("dtgui")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "dtgui"]


def cmd_install_desktop(args: argparse.Namespace) -> int:
    try:
        written = install_desktop(launcher(), xdg_data_home())
    except (OSError, ValueError) as exc:
        print(f"dtgui install-desktop: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    print("dtgui is in the application menu (log out and in again if it does not show yet).")
    return 0
