"""Helpers for tests that run real bundles: losses from events, processes left behind."""

from __future__ import annotations

import os
from pathlib import Path

from dtgui.core.events import STEP_KINDS, read_all, step_rows


def replica_losses(events_file: Path) -> list[list[float]]:
    """Every step's per-replica losses, in order (from the `steps` batches)."""
    out: list[list[float]] = []
    for event in read_all(events_file):
        rows = step_rows(event.data) if event.kind in STEP_KINDS else None
        if rows is not None:
            out.extend(rows.losses.tolist())
    return out


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
