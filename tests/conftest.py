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


# The labs that hold the whole machine (the SSH test hosts in their network namespaces, a Slurm
# cluster on fixed ports): with pytest-xdist, every test of a module that uses one runs in the
# same worker (`--dist loadgroup`); the other tests are spread over the workers.
LAB_MODULES = {"conftest_ssh", "sshhosts", "slurm_cluster", "remote_python"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    uses_lab: dict[Path, bool] = {}
    for item in items:
        path = Path(item.path)
        if path not in uses_lab:
            text = path.read_text(encoding="utf-8")
            uses_lab[path] = any(f"import {m}" in text or f"from {m} import" in text
                                 for m in LAB_MODULES)
        if uses_lab[path]:
            item.add_marker(pytest.mark.xdist_group("machine-lab"))


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
