"""A pool's settings (a registered machine's) and the job a run is in a pool."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dtgui.core.machines.registry import Machine

KIND = "pool"
JOB_FILE = "pool.json"  # the job in its bundle
TASK_MODULE = "dtgui_pool_task"  # the pool's part of the task program, in its bundles


class PoolError(ValueError):
    """A pool that cannot take a run: the message says why."""


@dataclass(frozen=True)
class PoolSettings:
    """A registered pool: its folder on this machine."""

    folder: str = ""

    def problems(self) -> list[str]:
        return [] if self.folder.strip() else ["A pool needs its folder."]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> PoolSettings:
        if not isinstance(data, dict):
            raise PoolError("The pool's settings are not a table.")
        return cls(folder=str(data.get("folder", "")))


def pool_settings(machine: Machine | None) -> PoolSettings | None:
    if machine is None or machine.kind != KIND or not isinstance(machine.settings, PoolSettings):
        return None
    return machine.settings


@dataclass(frozen=True)
class PoolJob:
    """A run in a pool: the pool's name, and the Python its tasks run with ("" = the
    pool's registered one)."""

    pool: str
    python: str = ""

    @property
    def kind(self) -> str:
        return KIND

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PoolJob:
        return cls(str(data["pool"]), str(data.get("python", "")))

    def save(self, bundle: Path) -> None:
        (bundle / JOB_FILE).write_text(json.dumps(self.to_dict()), encoding="utf-8")

    @classmethod
    def load(cls, bundle: Path) -> PoolJob | None:
        try:
            return cls.from_dict(json.loads((bundle / JOB_FILE).read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            return None
