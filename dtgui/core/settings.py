"""Where dtgui keeps its files, and the remembered settings of the last run.

Files are written atomically (temp file + rename). A file that cannot be parsed is moved
aside to `<name>.corrupt-<time>` and defaults are used; the caller gets the message to show.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import platformdirs

from dtgui.core.plans.plan import Plan, PlanError

APP = "dtgui"


def config_dir() -> Path:
    return Path(os.environ.get("DTGUI_CONFIG_DIR") or platformdirs.user_config_dir(APP))


def data_dir() -> Path:
    return Path(os.environ.get("DTGUI_DATA_DIR") or platformdirs.user_data_dir(APP))


def runs_dir() -> Path:
    return data_dir() / "runs"


def sweeps_dir() -> Path:
    """Where a sweep's folder goes when the user names none."""
    return data_dir() / "sweeps"


def _closed_file() -> Path:
    return data_dir() / "last-closed"


def remember_closed(when: float | None = None) -> None:
    """Note when dtgui's window closed: a run that ended after it ended while dtgui was closed."""
    atomic_write_text(_closed_file(), f"{time.time() if when is None else when:.3f}\n")


def last_closed() -> float:
    """When dtgui's window last closed (0.0: never noted, or unreadable)."""
    try:
        return float(_closed_file().read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return 0.0


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json_or_backup(path: Path) -> tuple[dict[str, Any] | None, str]:
    """(data, message). A missing file gives (None, ""); a corrupt one is moved aside."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"{path} could not be read ({exc.strerror}); using defaults."
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        return data, ""
    except ValueError:
        backup = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        try:
            os.replace(path, backup)
        except OSError:
            backup = path
        return None, f"{path.name} was damaged; it was kept as {backup} and defaults are used."


def preferences_file() -> Path:
    return config_dir() / "preferences.json"


def load_preferences() -> tuple[dict[str, Any] | None, str]:
    """The app's preferences (dtgui.core.tracking's among them), and a message when the file
    was damaged."""
    return read_json_or_backup(preferences_file())


def save_preferences(data: dict[str, Any]) -> None:
    atomic_write_text(preferences_file(), json.dumps(data, indent=2) + "\n")


def last_plan_file() -> Path:
    return config_dir() / "last-run.json"


def load_last_plan() -> tuple[Plan | None, str]:
    data, message = read_json_or_backup(last_plan_file())
    if data is None:
        return None, message
    try:
        return Plan.from_dict(data), ""
    except (PlanError, KeyError, TypeError, ValueError):
        return None, "The remembered settings are from another version; using defaults."


def save_last_plan(plan: Plan) -> None:
    atomic_write_text(last_plan_file(), plan.to_json())
