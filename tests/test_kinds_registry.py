"""The kinds' registry: dtgui's own kinds are found installed or not."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dtgui import kinds

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the project's Python 3.10 reads TOML with tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_the_built_in_kinds_are_those_pyproject_registers() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["entry-points"][kinds.GROUP] == kinds.BUILT_IN


def test_from_a_source_tree_not_installed_the_built_in_kinds_still_load(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kinds, "entry_points", lambda group: [])
    monkeypatch.setattr(kinds, "_kinds", None)
    monkeypatch.setattr(kinds, "_problems", [])
    assert sorted(kinds.kinds()) == ["local", "slurm", "ssh"]
    assert kinds.problems() == []
