"""dtgui's menu entry and icon, installed for the current user the XDG way.

The entry is the package's `dtgui.desktop` (the same file `packaging/` offers to distribution
packages, where `dtgui` is on PATH) with its Exec line pointing at the dtgui that installs
it, so a dtgui in a venv starts from the menu too. Files go to `$XDG_DATA_HOME/applications/`
and `$XDG_DATA_HOME/icons/hicolor/scalable/apps/` (`~/.local/share` when XDG_DATA_HOME is
unset, empty or relative, as the XDG Base Directory specification says).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from dtgui.core.settings import atomic_write_text
from dtgui.resources import resource

DESKTOP_FILE = "dtgui.desktop"
ICON_NAME = "dtgui"
# Characters that make the Desktop Entry specification ask for an argument to be quoted.
_RESERVED = re.compile(r"[ \t\n\"'\\><~|&;$*?#()`]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def xdg_data_home() -> Path:
    value = os.environ.get("XDG_DATA_HOME", "")
    return Path(value) if os.path.isabs(value) else Path.home() / ".local" / "share"


def desktop_exec(argv: Sequence[str]) -> str:
    """`argv` as the value of an Exec key: reserved characters quoted, `%` doubled, and the
    string escape applied on top (a literal backslash becomes four). Raises ValueError for a
    control character, which no desktop entry value can hold."""
    words = []
    for arg in argv:
        if not arg or _CONTROL.search(arg):
            raise ValueError(f"{arg!r} cannot be part of a desktop entry's command")
        arg = arg.replace("%", "%%")
        if _RESERVED.search(arg):
            arg = '"' + re.sub(r'(["`$\\])', r"\\\1", arg) + '"'
        words.append(arg.replace("\\", "\\\\"))
    return " ".join(words)


def desktop_entry(argv: Sequence[str]) -> str:
    """The package's desktop entry with Exec running `argv`."""
    template = resource(DESKTOP_FILE).read_text(encoding="utf-8")
    line = f"Exec={desktop_exec(argv)}"
    text, found = re.subn(r"(?m)^Exec=.*$", lambda _: line, template)
    if found != 1:
        raise ValueError(f"{resource(DESKTOP_FILE)} has {found} Exec lines, not one")
    return text


def install_desktop(argv: Sequence[str], data_home: Path | None = None) -> list[Path]:
    """Write the desktop entry (running `argv`) and the icon for the current user; returns
    the files written. Raises OSError when they cannot be written."""
    home = data_home or xdg_data_home()
    entry = home / "applications" / DESKTOP_FILE
    icon = home / "icons" / "hicolor" / "scalable" / "apps" / f"{ICON_NAME}.svg"
    text = desktop_entry(argv)
    atomic_write_text(icon, resource("icons", "dtgui.svg").read_text(encoding="utf-8"))
    atomic_write_text(entry, text)
    for path in (entry, icon):
        path.chmod(0o644)
    return [entry, icon]
