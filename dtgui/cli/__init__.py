"""The command line: `dtgui`, `dtgui export`, `dtgui run` (parsing and reporting only; what a
command does lives in the core and launch layers)."""

from __future__ import annotations

from dtgui.cli.main import main

__all__ = ["main"]
