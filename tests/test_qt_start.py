"""When Qt cannot load its xcb platform plugin it aborts dtgui; before that, dtgui says what to
do: the apt-get line of the missing system libraries (a broken libxcb-cursor here), or that
there is no X display."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

from dtgui.ui.qt_start import debian_packages

START = "from dtgui.ui.app import make_app; make_app([])"


def start_without_window(tmp_path: Path, **env: str) -> str:
    """dtgui's application started on X11 at a display that does not exist; its stderr."""
    proc = subprocess.run([sys.executable, "-c", START], capture_output=True, text=True,
                          timeout=120, cwd=ROOT,
                          env={**os.environ, "QT_QPA_PLATFORM": "xcb", "DISPLAY": ":9999",
                               **env})
    assert proc.returncode != 0  # Qt aborts
    return proc.stderr


def test_missing_system_libraries_are_named_with_the_line_that_installs_them(
        tmp_path: Path) -> None:
    (tmp_path / "libxcb-cursor.so.0").write_bytes(b"")  # found first, and unloadable
    err = start_without_window(tmp_path, LD_LIBRARY_PATH=str(tmp_path))
    assert "sudo apt-get install " + " ".join(debian_packages()) in err
    assert "libxcb-cursor0" in debian_packages()
    assert "no X display" not in err


def test_no_display_says_so_rather_than_blame_libraries(tmp_path: Path) -> None:
    err = start_without_window(tmp_path)
    assert "no X display at DISPLAY=':9999'" in err and "xvfb-run" in err
    assert "apt-get" not in err


def test_the_readme_names_the_same_system_libraries() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert [p for p in debian_packages() if p not in readme] == []
