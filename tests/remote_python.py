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

A `.pth` file there adds the site-packages. It is made once a test session (the first
`python_for()`), and removed by `cleanup()` when the SSH test hosts stop
(`conftest_ssh.ssh_lab`). The copy of a base installation leaves out the base's own
site-packages when the venv does not use them (tens of thousands of files, for nothing).
"""

from __future__ import annotations

import atexit
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
_pythons: dict[str, str] = {}  # user -> the interpreter made for it this session


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


def _linked_copy(source: Path, target: Path, leave_out: Path | None = None) -> None:
    """`source` copied to `target` as hard links, without `leave_out` (a path under
    `source`; its parent directories are made, empty)."""
    if leave_out is not None and leave_out.is_relative_to(source) and leave_out != source:
        target.mkdir(parents=True, exist_ok=True)
        shutil.copystat(source, target)
        inner = source / leave_out.relative_to(source).parts[0]
        for entry in source.iterdir():
            if entry == inner:
                _linked_copy(entry, target / entry.name, leave_out)
            elif entry != leave_out:
                _linked_copy(entry, target / entry.name)
        return
    if subprocess.run(["cp", "-al", str(source), str(target)],
                      capture_output=True).returncode != 0:  # another file system
        shutil.rmtree(target, ignore_errors=True)
        if source.is_dir() and not source.is_symlink():
            shutil.copytree(source, target, symlinks=True)
        else:
            shutil.copy2(source, target, follow_symlinks=False)


def python_for(user: str = sshhosts.TEST_USER) -> str:
    """An interpreter path `user` can run that imports this machine's TensorFlow (made once a
    session)."""
    if user not in _pythons:
        if not _made:
            atexit.register(cleanup)  # should the session end without its teardown
        _pythons[user] = _make_python(user)
    return _pythons[user]


def _make_python(user: str) -> str:
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
        base_site = Path(sysconfig.get_paths(vars={"base": sys.base_prefix})["purelib"])
        used = {Path(p).resolve() for p in site.getsitepackages()}
        _linked_copy(Path(sys.base_prefix), copy,
                     None if base_site.resolve() in used else base_site)
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
    """Forget the interpreters made and remove their directories, in a process of its own:
    thousands of hard links take seconds to unlink, and nothing waits for them."""
    _pythons.clear()
    if _made:
        subprocess.Popen(["rm", "-rf", "--", *map(str, _made)], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        _made.clear()
