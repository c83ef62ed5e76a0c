"""Helpers for tests that run real bundles: losses from events, processes left behind, and a
Python whose tasks train with a stub instead of TensorFlow."""

from __future__ import annotations

import atexit
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dtgui.core.events import STEP_KINDS, read_all, step_rows

STUB_TASK = Path(__file__).with_name("stub_task.py")
_stubs: dict[tuple[str, float, str], str] = {}  # (python, step seconds, fail) -> wrapper


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


def stub_python(python: str = sys.executable, step_seconds: float = 0.02, fail: str = "") -> str:
    """An interpreter path for a launch (`python=`, a target's python) whose tasks run the
    bundle's real supervisor with tests/stub_task.py as the training child: the run policy
    without TensorFlow. Every other command goes to `python` (probes, port checks).
    `fail`: "TASK=ERROR", that task reports ERROR and exits 1. In a directory the SSH test
    account can read; made once a session for the same arguments (so the launch check's
    memory of it holds from test to test) and removed when the session ends."""
    key = (python, step_seconds, fail)
    if key not in _stubs:
        if not _stubs:
            atexit.register(_remove_stubs)
        _stubs[key] = _make_stub(python, step_seconds, fail)
    return _stubs[key]


def stub_losses(steps: Sequence[float], replica: int) -> list[float]:
    """The loss the stub child reports for `replica` at each of `steps` (tests/stub_task.py:
    a function of the step, as an uninterrupted run's losses are of its steps)."""
    return [float(np.float32(2.0 / np.sqrt(np.float32(s)) + 0.01 * np.float32(replica)))
            for s in steps]


def _make_stub(python: str, step_seconds: float, fail: str) -> str:
    folder = Path(tempfile.mkdtemp(prefix="dtgui-stub-python-"))
    folder.chmod(0o755)
    stub = folder / STUB_TASK.name
    shutil.copyfile(STUB_TASK, stub)
    stub.chmod(0o644)
    wrapper = folder / "python3"
    wrapper.write_text(
        "#!/bin/sh\n"
        'case "$1 $2" in\n'
        f'  "-m dtgui_worker."*) export DTGUI_STUB_STEP_SECONDS={step_seconds} '
        f"DTGUI_STUB_FAIL={shlex.quote(fail)}\n"
        f'    exec {shlex.quote(python)} {shlex.quote(str(stub))} "$0" "$@" ;;\n'
        "esac\n"
        f'exec {shlex.quote(python)} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def _remove_stubs() -> None:
    while _stubs:
        shutil.rmtree(Path(_stubs.popitem()[1]).parent, ignore_errors=True)
