"""Helpers for tests that run real bundles: losses from events, processes left behind."""

from __future__ import annotations

import os
from pathlib import Path

from dtgui.core.events import read_all


def replica_losses(events_file: Path) -> list[list[float]]:
    return [e.get("replica_losses") for e in read_all(events_file) if e.kind == "step"]


def live_members(pgids: list[int]) -> list[str]:
    """Processes (not zombies) still in any of these process groups."""
    left = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        state, pgid = fields[0], int(fields[2])
        if pgid in pgids and state != "Z":
            left.append(f"pid {entry.name} ({stat.split(' ', 2)[1]}) state {state}")
    return left
