"""Shared test set-up: Qt offscreen, and dtgui's config/data dirs inside a temp dir."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    base = tmp_path_factory.mktemp("dtgui-home")
    monkeypatch.setenv("DTGUI_CONFIG_DIR", str(base / "config"))
    monkeypatch.setenv("DTGUI_DATA_DIR", str(base / "data"))
    return base


@pytest.fixture
def stub_python() -> Iterator[Callable[..., str]]:
    """`stub_python(python=..., step_seconds=..., fail=...)`: an interpreter path whose tasks
    train with tests/stub_task.py instead of TensorFlow (runs.stub_python); removed after."""
    import runs

    yield runs.stub_python
    runs.remove_stub_pythons()
