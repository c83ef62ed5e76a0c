"""Before a launch: can each machine's Python run the bundle?

For every machine of the plan, its chosen interpreter is run once with `CHECK_CODE`: the
Python version, the installed TensorFlow / numpy / psutil versions (package metadata: no
TensorFlow import), and the tools the launcher needs (setsid, nohup, awk, tail). TensorFlow
must be the version this machine has (the bundle's pinned version). The first time a machine
passes, TensorFlow is also imported there (a broken install fails here, with its error, and not
in the middle of a run); a passing import is remembered in `data_dir()/launch-checks.json`
for that exact interpreter and versions, so later launches skip the import.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dtgui.core.settings import atomic_write_text, data_dir, read_json_or_backup
from dtgui.launch.remote_scripts import CHECK_CODE, parse_check

if TYPE_CHECKING:
    import paramiko

MIN_PYTHON = (3, 10)
CHECK_TIMEOUT = 120.0
Runner = Callable[[list[str]], tuple[int, str, str]]  # CHECK_CODE's args -> (code, out, err)


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
    busy_ports: list[int] = field(default_factory=list)
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


def local_runner(python: str) -> Runner:
    def run(args: list[str]) -> tuple[int, str, str]:
        try:
            proc = subprocess.run([python, "-c", CHECK_CODE, *args], capture_output=True,
                                  text=True, timeout=CHECK_TIMEOUT,
                                  env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        except FileNotFoundError:
            return 127, "", f"{python}: not found"
        except subprocess.TimeoutExpired:
            return 124, "", f"{python} did not answer within {CHECK_TIMEOUT:g} s"
        return proc.returncode, proc.stdout, proc.stderr

    return run


def ssh_runner(client: paramiko.SSHClient, python: str) -> Runner:
    from dtgui.remote.transfer import run_bytes

    def run(args: list[str]) -> tuple[int, str, str]:
        code, out, err = run_bytes(client, ["env", "TF_CPP_MIN_LOG_LEVEL=3", python, "-c",
                                            CHECK_CODE, *args], CHECK_TIMEOUT)
        return code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")

    return run


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


def check_python(machine: str, python: str, runner: Runner, expected: str | None, *,
                 import_tf: bool = True, directory: str = "", port_count: int = 0,
                 ports: tuple[int, ...] = (), modules: tuple[str, ...] = (),
                 data_dir: str = "") -> PythonCheck:
    """Check one machine's interpreter; `problems` say what is wrong and what to do.

    In the same round trip: make `directory` (relative to the home directory), choose
    `port_count` free ports and bind-test `ports` (busy ones are in `busy_ports`)."""
    result = PythonCheck(machine, python)
    mods = [f"mods={','.join(modules)}"] if modules else []  # a user's script's imports
    mods += [f"isdir={data_dir}"] if data_dir else []  # ... and the data it expects there
    code, out, err = runner(["fast", directory, str(port_count), *map(str, ports), *mods])
    data = parse_check(out)
    if data is None:
        detail = (err or out).strip().splitlines()[-1:] or [f"exit code {code}"]
        result.problems.append(
            f"{machine}: the Python interpreter {python!r} cannot be run there ({detail[0][:200]})."
            " Choose the machine's Python with TensorFlow installed.")
        return result
    result.executable = str(data.get("executable", ""))
    result.python_version = str(data.get("python", ""))
    packages = {k: str(v) for k, v in (data.get("packages") or {}).items()}
    result.tf_version = packages.get("tensorflow") or packages.get("tensorflow-cpu") or ""
    result.home = str(data.get("home", ""))
    result.directory = str(data.get("dir", ""))
    result.free_ports = [int(p) for p in data.get("free_ports", [])]
    result.busy_ports = [int(p) for p in data.get("busy_ports", [])]
    result.packages = packages
    result.data_dir_found = data.get("isdir") if data_dir else None
    result.missing_modules = [str(m) for m in data.get("missing_modules", [])]
    if data.get("dir_error"):
        result.problems.append(f"{machine}: cannot make the run directory {directory!r} there: "
                               f"{data['dir_error']}")
    result.problems += _problems(machine, python, result, packages, data, expected)
    if result.problems or not import_tf:
        return result
    key = _cache_key(result, packages)
    if _cached(key):
        result.tf_imported = True
        return result
    code, out, err = runner(["full"])
    full = parse_check(out) or {}
    if full.get("tf_import"):
        result.tf_imported = True
        _remember(key)
    else:
        why = full.get("tf_import_error") or (err or out).strip()[-200:] or f"exit code {code}"
        result.problems.append(f"{machine}: TensorFlow {result.tf_version} is installed for "
                               f"{python} but does not import: {why}")
    return result


def _problems(machine: str, python: str, result: PythonCheck, packages: dict[str, str],
              data: dict, expected: str | None) -> list[str]:
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
    missing = [t for t in ("setsid", "nohup", "awk", "tail", "tar") if not tools.get(t, True)]
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
