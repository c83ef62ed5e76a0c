"""A Python with this machine's TensorFlow that the SSH test account can run.

The test hosts share this machine's files, so the test account could run this very
interpreter - unless it, or the venv's packages, live where that account cannot enter: a
checkout in a private directory (mode 0700, as `mktemp -d` and Debian home directories are),
or a venv made from a pyenv Python under /root. Nothing of the user's is opened up for it.
Instead a temporary directory the account can read gets what it lacks, linked with hard links
(instant, no space; a plain copy when the directory is on another file system):

* the venv's site-packages, when the account cannot reach them;
* the interpreter: a venv of the base Python when the account can run that, else a copy of
  the base installation with a wrapper that finds its libpython.

A `.pth` file there adds the site-packages. All of it is removed by `cleanup()`.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import sshhosts

_made: list[Path] = []


def runs_as(user: str, python: str) -> bool:
    code = "import importlib.metadata as m; m.version(\"tensorflow\"); import numpy, psutil"
    proc = subprocess.run(["su", "-s", "/bin/sh", user, "-c", f"{python} -c '{code}'"],
                          capture_output=True, timeout=120,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, cwd="/")
    return proc.returncode == 0


def reaches(user: str, path: str | Path) -> bool:
    """Whether `user` can open `path` (read it, and enter it when it is a directory)."""
    check = 'test -r "$1" && { test ! -d "$1" || test -x "$1"; }'
    return subprocess.run(["su", "-s", "/bin/sh", user, "-c", check, "sh", str(path)],
                          capture_output=True, timeout=30, cwd="/").returncode == 0


def _linked_copy(source: Path, target: Path) -> None:
    if subprocess.run(["cp", "-al", str(source), str(target)],
                      capture_output=True).returncode != 0:  # another file system
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target, symlinks=True)


def python_for(user: str = sshhosts.TEST_USER) -> str:
    """An interpreter path `user` can run that imports this machine's TensorFlow."""
    if runs_as(user, sys.executable):
        return sys.executable
    tmp = Path(tempfile.mkdtemp(prefix="dtgui-testpython-"))
    tmp.chmod(0o755)
    _made.append(tmp)
    sites = []
    for n, path in enumerate(p for p in site.getsitepackages() if Path(p).is_dir()):
        if not reaches(user, path):
            _linked_copy(Path(path), tmp / f"site-packages-{n}")
            path = str(tmp / f"site-packages-{n}")
        sites.append(path)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base_python = Path(sys.base_prefix) / "bin" / version
    if reaches(user, base_python):
        venv = tmp / "venv"
        subprocess.run([str(base_python), "-m", "venv", "--without-pip", str(venv)],
                       check=True, capture_output=True, timeout=120)
        purelib = venv / "lib" / version / "site-packages"
        python = venv / "bin" / "python3"
    else:
        copy = tmp / "base"
        _linked_copy(Path(sys.base_prefix), copy)
        purelib = Path(sysconfig.get_paths(vars={"base": str(copy)})["purelib"])
        python = tmp / "python3"
        python.write_text(
            "#!/bin/sh\n"
            f'LD_LIBRARY_PATH="{copy / "lib"}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" '
            f'exec "{copy / "bin" / version}" "$@"\n')
        python.chmod(0o755)
    purelib.mkdir(parents=True, exist_ok=True)
    lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in sites)
    (purelib / "dtgui-test-venv.pth").write_text(lines)
    if not runs_as(user, str(python)):
        raise RuntimeError(f"{user} cannot run TensorFlow with {python} either")
    return str(python)


def cleanup() -> None:
    while _made:
        shutil.rmtree(_made.pop(), ignore_errors=True)
