"""A user's own training script as a plan's model (docs/own-scripts.md).

The plan holds it as a `ScriptModel` (plan.json: ``{"kind": "script", "project": DIR, "entry":
"train.py", "args": [...], "env": {"KEY": "VALUE"}, "legacy_keras": false, "data_dir": ""}``).
Before the bundle is written, ``project`` is the user's folder (absolute); in a bundle it is
``project`` (relative to the bundle, the folder's copy). Pure Python: no Qt, no TensorFlow.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

# The script model itself is part of the plan every bundle carries.
from dtgui.worker.plan import BUNDLE_PROJECT_DIR as BUNDLE_PROJECT_DIR
from dtgui.worker.plan import ScriptModel as ScriptModel
from dtgui.worker.printed_metrics import compile_patterns

# A name a POSIX shell accepts in `export NAME=...`.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Set by dtgui for every task: a user's variable must not replace them.
RESERVED_ENV = frozenset({
    "TF_CONFIG", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTHONPATH",
    "TF_USE_LEGACY_KERAS", "PYTHONUNBUFFERED", "PYTHONHASHSEED",
})
RESERVED_PREFIX = "DTGUI_"


def env_name_problem(name: str) -> str:
    """Why `name` cannot be a variable a user sets ("" when it can)."""
    if not _ENV_NAME.fullmatch(name):
        return (f"{name!r} is not a variable name: use letters, digits and '_', not starting "
                "with a digit.")
    if name in RESERVED_ENV or name.startswith(RESERVED_PREFIX):
        return f"{name} is set by dtgui for every task: choose another name."
    return ""


def parse_env_lines(text: str) -> tuple[dict[str, str], list[str]]:
    """KEY=VALUE lines (blank lines and `# comments` skipped) to a dict, and every problem
    as a sentence naming its line."""
    env: dict[str, str] = {}
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep:
            problems.append(f"Line {number} ({line[:40]!r}) is not KEY=VALUE.")
            continue
        problem = env_name_problem(name) or env_value_problem(name, value)
        if problem:
            problems.append(f"Line {number}: {problem}")
        elif name in env:
            problems.append(f"Line {number}: {name} is set twice.")
        else:
            env[name] = value
    return env, problems


def env_value_problem(name: str, value: str) -> str:
    if "\n" in value or "\r" in value:
        return f"the value of {name} has a line break: a variable's value must be one line."
    if "\x00" in value:
        return f"the value of {name} has a NUL character, which no environment can hold."
    return ""


def env_lines(env: Mapping[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in env.items())


def entry_problem(project: str, entry: str, *, must_exist: bool = True) -> str:
    """Why the entry script cannot be run ("" when it can)."""
    if not project:
        return "Choose the project folder of your training script."
    if not entry:
        return "Choose the entry script (a .py inside the project folder)."
    rel = PurePosixPath(entry)
    if rel.is_absolute() or ".." in rel.parts or "\\" in entry:
        return (f"The entry script {entry!r} must be a path inside the project folder "
                "(e.g. train.py or src/train.py).")
    if must_exist:
        root = Path(project).expanduser()
        if not root.is_dir():
            return f"The project folder {project} does not exist."
        if not (root / entry).is_file():
            return f"{entry} is not a file in {project}."
    return ""


def script_problems(script: ScriptModel, *, must_exist: bool = False) -> list[str]:
    """Every reason a script model cannot run (plan validation)."""
    problems = []
    problem = entry_problem(script.project, script.entry, must_exist=must_exist)
    if problem:
        problems.append(problem)
    for name, value in script.env.items():
        problem = env_name_problem(name) or env_value_problem(name, value)
        if problem:
            problems.append(f"Environment: {problem}")
    problems += [f"Argument {a!r} has a line break or a NUL character: give it on one line."
                 for a in script.args if any(c in a for c in "\n\r\x00")]
    if script.data_dir and not script.data_dir.startswith(("/", "~")):
        problems.append("The data folder on each machine must be an absolute path "
                        "(e.g. /data/imagenet).")
    problems += [f"Printed metrics: {p}" for p in compile_patterns(script.patterns)[1]]
    return problems


def quoted_args(args: Iterable[str]) -> str:
    return shlex.join(list(args))


def split_args(text: str) -> tuple[list[str], str]:
    """Arguments typed as a shell would split them; ([], problem) when the quoting is open."""
    try:
        return shlex.split(text), ""
    except ValueError as exc:
        return [], f"The arguments cannot be split: {exc} (close the quote)."
