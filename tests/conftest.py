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


# The labs that hold a resource of the whole machine run each in one pytest-xdist worker
# (`--dist loadgroup`), their tests in an xdist group of their own:
# * "ssh-lab": every test that uses the SSH test hosts (the `ssh_lab` fixture, session-scoped:
#   one lab a worker, and one lab at a time on a machine, sshhosts.LOCK_FILE, so a second worker
#   starting its own would wait for the first to end);
# * "slurm-lab": the other tests of a module that starts a Slurm cluster (tests/slurm_cluster.py),
#   one cluster at a time there rather than one a worker.
# The two labs share nothing (the Slurm clusters have their own ports, directories and
# SLURM_CONF), so they run side by side; every other test - the lab modules' own tests of
# parsing, local runs and widgets included - is spread over the workers one by one.
SSH_LAB_FIXTURE = "ssh_lab"
SLURM_LAB_MODULE = "slurm_cluster"


def _imports(path: Path, module: str) -> bool:
    text = path.read_text(encoding="utf-8")
    return f"import {module}" in text or f"from {module} import" in text


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    slurm_modules: dict[Path, bool] = {}
    for item in items:
        path = Path(item.path)
        if path not in slurm_modules:
            slurm_modules[path] = _imports(path, SLURM_LAB_MODULE)
        if SSH_LAB_FIXTURE in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("ssh-lab"))
        elif slurm_modules[path]:
            item.add_marker(pytest.mark.xdist_group("slurm-lab"))
    # Workers take the other tests in this order: the slow ones (TensorFlow training) first,
    # so that the suite ends on short tests and no worker waits long for the last one.
    items.sort(key=lambda item: 0 if item.get_closest_marker("xdist_group")
               else 1 if item.get_closest_marker("slow") else 2)


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
