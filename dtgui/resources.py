"""Where the repository's resources/ directory is (icons, style, demo data)."""

from __future__ import annotations

from pathlib import Path

RESOURCES = Path(__file__).resolve().parent.parent / "resources"
DEMO_DATA = RESOURCES / "data" / "digits.npz"
WORKER_SOURCE = Path(__file__).resolve().parent / "worker"


def resource(*parts: str) -> Path:
    return RESOURCES.joinpath(*parts)
