"""dtgui's own files, package data beside this module: icons, the style sheet, the demo data
and the desktop entry. Found relative to the package, so an installed dtgui has them too."""

from __future__ import annotations

from pathlib import Path

RESOURCES = Path(__file__).resolve().parent
DEMO_DATA = RESOURCES / "data" / "digits.npz"
WORKER_SOURCE = RESOURCES.parent / "worker"  # the training program copied into bundles


def resource(*parts: str) -> Path:
    return RESOURCES.joinpath(*parts)
