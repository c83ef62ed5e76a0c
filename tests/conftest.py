"""Shared test set-up: Qt offscreen, and dtgui's config/data dirs inside a temp dir."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


_launch_checks: list[str] = []  # the last launch-checks.json, carried from test to test


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """dtgui's config and data dirs, new for each test - but for the launch check's memory of
    the interpreters whose TensorFlow imported (launch-checks.json), which carries on as it
    does for a user from launch to launch: one TensorFlow import a machine and interpreter a
    session, not one a launch."""
    base = tmp_path_factory.mktemp("dtgui-home")
    monkeypatch.setenv("DTGUI_CONFIG_DIR", str(base / "config"))
    monkeypatch.setenv("DTGUI_DATA_DIR", str(base / "data"))
    checks = base / "data" / "launch-checks.json"
    if _launch_checks:
        checks.parent.mkdir(parents=True, exist_ok=True)
        checks.write_text(_launch_checks[0])
    yield base
    if checks.is_file():
        _launch_checks[:] = [checks.read_text()]


@pytest.fixture
def stub_python() -> Callable[..., str]:
    """`stub_python(python=..., step_seconds=..., fail=...)`: an interpreter path whose tasks
    train with tests/stub_task.py instead of TensorFlow (runs.stub_python)."""
    import runs

    return runs.stub_python
