"""Before a launch: can each machine's Python run the bundle?

For every machine of the plan, its chosen interpreter runs the machine probe once
(`dtgui.remote.probe`, the same command on this machine and over SSH): the Python version,
the installed TensorFlow / numpy / psutil versions (package metadata: no TensorFlow import),
the tools the launcher needs (setsid, nohup, awk, tail, tar), and in the same round trip the
run directory, free ports and the ports the plan wants. TensorFlow must be the version this
machine has (the bundle's pinned version). The first time a machine passes, TensorFlow is also
imported there (a broken install fails here, with its error, and not in the middle of a run);
a passing import is remembered in `data_dir()/launch-checks.json` for that exact interpreter
and versions, so later launches skip the import.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dtgui.core.settings import atomic_write_text, data_dir, read_json_or_backup
from dtgui.core.time_limits import start_limit
from dtgui.remote.commands import CommandRunner, CommandTimeout
from dtgui.remote.probe import ask, ask_tensorflow
from dtgui.worker.machine_probe import TOOLS

MIN_PYTHON = (3, 10)
CHECK_TIMEOUT = start_limit(120.0)


@dataclass
class PythonCheck:
    machine: str
    python: str
    executable: str = ""
    python_version: str = ""
    tf_version: str = ""
    tf_imported: bool = False  # TensorFlow was imported (now or in an earlier launch)
    problems: list[str] = field(default_factory=list)
    home: str = ""
    directory: str = ""  # the directory made for the run ("" when none was asked for)
    free_ports: list[int] = field(default_factory=list)
    ports_in_use: list[int] = field(default_factory=list)
    packages: dict[str, str] = field(default_factory=dict)  # name -> version ("" = absent)
    missing_modules: list[str] = field(default_factory=list)  # of the `modules` asked about
    data_dir_found: bool | None = None  # the `data_dir` asked about exists (None: not asked)

    @property
    def ok(self) -> bool:
        return not self.problems


def expected_tf_version() -> str | None:
    """This machine's TensorFlow version (what the bundle pins), None when it has none."""
    for name in ("tensorflow", "tensorflow-cpu"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _cache_file() -> Path:
    return data_dir() / "launch-checks.json"


def _cache_key(result: PythonCheck, packages: dict[str, str]) -> str:
    versions = ",".join(f"{k}={packages.get(k, '')}" for k in sorted(packages))
    return f"{result.machine}|{result.python}|{result.executable}|{result.python_version}|{versions}"


def _cached(key: str) -> bool:
    data, _ = read_json_or_backup(_cache_file())
    return data is not None and key in data


def _remember(key: str) -> None:
    data, _ = read_json_or_backup(_cache_file())
    data = dict(data or {})
    data[key] = time.time()
    with contextlib.suppress(OSError):
        atomic_write_text(_cache_file(), json.dumps(data, indent=1) + "\n")


def check_python(machine: str, python: str, runner: CommandRunner, expected: str | None, *,
                 import_tf: bool = True, directory: str = "", port_count: int = 0,
                 ports: tuple[int, ...] = (), modules: tuple[str, ...] = (),
                 data_dir: str = "") -> PythonCheck:
    """Check one machine's interpreter (`runner`: that machine's); `problems` say what is
    wrong and what to do.

    In the same round trip: make `directory` (relative to the home directory), choose
    `port_count` free ports and test `ports` (busy ones are in `ports_in_use`), look for the
    `modules` a user's script imports and its `data_dir`."""
    result = PythonCheck(machine, python)
    args = ["facts", "--packages", "--free-ports", str(port_count)]
    args += ["--dir", directory] if directory else []
    for port in ports:
        args += ["--test-port", str(port)]
    for module in modules:  # a user's script's imports
        args += ["--module", module]
    args += ["--data-dir", data_dir] if data_dir else []  # ... and the data it expects there
    answer = ask(runner, python, args, CHECK_TIMEOUT)
    data = answer.data
    if data is None:
        result.problems.append(_no_answer(machine, python, runner, answer.detail))
        return result
    result.executable = str(data.get("executable", ""))
    result.python_version = str(data.get("python", ""))
    packages = {k: str(v) for k, v in (data.get("packages") or {}).items()}
    result.tf_version = packages.get("tensorflow") or packages.get("tensorflow-cpu") or ""
    result.home = str(data.get("home", ""))
    result.directory = str(data.get("dir", ""))
    checked = data.get("ports") or {}
    result.free_ports = [int(p) for p in checked.get("free", [])]
    result.ports_in_use = [int(p) for p in checked.get("busy", {})]
    result.packages = packages
    result.data_dir_found = bool(data.get("isdir")) if data_dir else None
    result.missing_modules = [str(m) for m in data.get("missing_modules", [])]
    if data.get("dir_error"):
        result.problems.append(f"{machine}: cannot make the run directory {directory!r} there: "
                               f"{data['dir_error']}")
    for port, why in (checked.get("errors") or {}).items():
        result.problems.append(f"{machine}: port {port} could not be tested there ({why}).")
    result.problems += _problems(machine, python, result, packages, data, expected)
    if result.problems or not import_tf:
        return result
    key = _cache_key(result, packages)
    if _cached(key):
        result.tf_imported = True
        return result
    imported = ask_tensorflow(runner, python, devices=False, timeout=CHECK_TIMEOUT)
    tf = (imported.data or {}).get("tensorflow") or {}
    if tf.get("tensorflow"):
        result.tf_imported = True
        _remember(key)
    else:
        why = (tf.get("error") or (imported.data or {}).get("error") or imported.detail
               or f"exit code {imported.code}")
        result.problems.append(f"{machine}: TensorFlow {result.tf_version} is installed for "
                               f"{python} but does not import: {why}")
    return result


def _no_answer(machine: str, python: str, runner: CommandRunner, detail: str) -> str:
    """Why the interpreter gave no answer: not there, too old to run the probe, or broken."""
    try:
        code, out, err = runner.run([python, "--version"], 30)
    except CommandTimeout:
        code, out, err = 124, b"", b""
    m = re.search(rb"Python (\d+)\.(\d+)\S*", out + err) if code == 0 else None
    if m and (int(m.group(1)), int(m.group(2))) < MIN_PYTHON:
        return (f"{machine}: {python} is Python {m.group(0)[7:].decode()}; dtgui's worker needs "
                f"Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer.")
    return (f"{machine}: the Python interpreter {python!r} cannot be run there "
            f"({detail[:200]}). Choose the machine's Python with TensorFlow installed.")


def _problems(machine: str, python: str, result: PythonCheck, packages: dict[str, str],
              data: dict[str, Any], expected: str | None) -> list[str]:
    out = []
    try:
        version = tuple(int(x) for x in result.python_version.split(".")[:2])
    except ValueError:
        version = (0, 0)
    if version < MIN_PYTHON:
        out.append(f"{machine}: {python} is Python {result.python_version or '?'}; dtgui's "
                   f"worker needs Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer.")
    if not result.tf_version:
        want = f"=={expected}" if expected else ""
        out.append(f"{machine}: TensorFlow is not installed for {python} (install it there: "
                   f"{python} -m pip install tensorflow{want}).")
    elif expected and result.tf_version != expected:
        out.append(f"{machine} has TensorFlow {result.tf_version}, this machine {expected}: "
                   f"every machine needs the same version ({python} -m pip install "
                   f"tensorflow=={expected} there).")
    for name in ("numpy", "psutil"):
        if not packages.get(name):
            out.append(f"{machine}: {python} lacks the package {name} ({python} -m pip "
                       f"install {name}).")
    tools = data.get("tools") or {}
    missing = [t for t in TOOLS if not tools.get(t, True)]
    if missing:
        out.append(f"{machine}: {', '.join(missing)} not found (Debian/Ubuntu: coreutils, "
                   "util-linux, mawk, tar).")
    return out


def check_versions_agree(checks: list[PythonCheck]) -> list[str]:
    """With no TensorFlow here, every machine must at least have the same version."""
    versions = {c.tf_version for c in checks if c.tf_version}
    if len(versions) <= 1:
        return []
    listing = ", ".join(f"{c.machine} {c.tf_version}" for c in checks)
    return [f"The machines have different TensorFlow versions ({listing}): install one version "
            "everywhere."]
