"""A Python with this machine's TensorFlow that the SSH test account can run.

The test hosts share this machine's files, so the test account could run this very
interpreter - unless it lives where that account cannot read (a venv made from a pyenv
Python under /root, say). Then the base interpreter is copied into a temporary directory
with hard links (instant, no space; a plain copy when hard links are not possible), with a
`.pth` file that adds this venv's site-packages and a wrapper that finds its libpython. The
copy is removed by `cleanup()`.
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


def python_for(user: str = sshhosts.TEST_USER) -> str:
    """An interpreter path `user` can run that imports this machine's TensorFlow."""
    if runs_as(user, sys.executable):
        return sys.executable
    base = Path(sys.base_prefix)
    tmp = Path(tempfile.mkdtemp(prefix="dtgui-testpython-"))
    tmp.chmod(0o755)
    _made.append(tmp)
    copy = tmp / "base"
    if subprocess.run(["cp", "-al", str(base), str(copy)], capture_output=True).returncode != 0:
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(base, copy, symlinks=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    purelib = Path(sysconfig.get_paths(vars={"base": str(copy)})["purelib"])
    purelib.mkdir(parents=True, exist_ok=True)
    sites = [p for p in site.getsitepackages() if Path(p).is_dir()]
    lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in sites)
    (purelib / "dtgui-test-venv.pth").write_text(lines)
    wrapper = tmp / "python3"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'LD_LIBRARY_PATH="{copy / "lib"}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" '
        f'exec "{copy / "bin" / version}" "$@"\n')
    wrapper.chmod(0o755)
    if not runs_as(user, str(wrapper)):
        raise RuntimeError(f"{user} cannot run TensorFlow with {wrapper} either")
    return str(wrapper)


def cleanup() -> None:
    while _made:
        shutil.rmtree(_made.pop(), ignore_errors=True)
