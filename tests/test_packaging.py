"""dtgui installs like a package: a wheel built from the source (pip's isolated build, as
`pip install .` does), installed (not editable) into a fresh venv, exports and trains the demo,
finds its icons and style sheet, and installs a valid desktop entry.

TensorFlow is not installed again (minutes): the fresh venv sees this venv's site-packages
through a `.pth` line that names the directory. Such a line adds the directory to sys.path
without running the `.pth` files in it, so this checkout's editable install of dtgui stays
invisible: dtgui comes from the wheel only, which the tests check.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow
VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"


def run(argv: list[str | Path], cwd: Path, timeout: float = 600, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**clean, **env})
    assert proc.returncode == 0, f"{argv}: {proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of a copy of the source (pyproject.toml, README.md and dtgui/ only, so the
    build writes nothing into the checkout and cannot take files from elsewhere in it)."""
    work = tmp_path_factory.mktemp("build")
    src = work / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "dtgui", src / "dtgui",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", work / "dist", src],
        cwd=work)
    (found,) = (work / "dist").glob("dtgui-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("installed") / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=venv.parent)
    python = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel],
        cwd=venv.parent)
    # Only now, so that pip does not see this checkout's editable dtgui while installing.
    deps = Path(sysconfig.get_paths()["purelib"])
    (venv / "lib" / VERSION / "site-packages" / "project-dependencies.pth").write_text(
        f"{deps}\n")
    return venv


def test_the_wheel_holds_the_package_data(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("dtgui/resources/style.qss", "dtgui/resources/icons/dtgui.svg",
                 "dtgui/resources/data/digits.npz", "dtgui/resources/dtgui.desktop",
                 "dtgui/resources/qt-debian-packages.txt", "dtgui/worker/train.py"):
        assert name in names, name


def test_the_installed_dtgui_comes_from_the_wheel_and_finds_its_files(venv: Path) -> None:
    out = run([venv / "bin" / "python", "-c",
               "import json, sys, dtgui, dtgui.resources as r\n"
               "print(json.dumps({'file': dtgui.__file__, 'path': sys.path,\n"
               "  'files': [p.is_file() for p in (r.DEMO_DATA, r.resource('style.qss'),\n"
               "            r.resource('icons', 'dtgui.svg'))]}))"], cwd=venv.parent)
    found = json.loads(out)
    site = venv / "lib" / VERSION / "site-packages"
    assert Path(found["file"]).is_relative_to(site)
    assert not any(p and Path(p).resolve() == ROOT for p in found["path"])
    assert found["files"] == [True, True, True]
    style = run([venv / "bin" / "python", "-c",
                 "from dtgui.ui.app import make_app; print(len(make_app([]).styleSheet()))"],
                cwd=venv.parent, QT_QPA_PLATFORM="offscreen")
    assert int(style.split()[-1]) > 100


def test_the_installed_dtgui_exports_and_trains_the_demo(venv: Path) -> None:
    work = venv.parent
    out = work / "demo-bundle"
    run([venv / "bin" / "dtgui", "export", out, "--run-name", "installed-demo",
         "--strategy", "mirrored", "--replicas", "2", "--steps", "6"], cwd=work)
    assert (out / "data" / "digits.npz").is_file()
    assert (out / "dtgui_worker" / "train.py").is_file()
    text = run([venv / "bin" / "dtgui", "run", out], cwd=work, timeout=900)
    assert "step 6/6" in text and "run finished" in text, text[-2000:]  # its progress
    events = [json.loads(line) for line in
              (out / "output" / "events-worker-0.jsonl").read_text().splitlines()]
    finished = [e for e in events if e["kind"] == "finished"]
    assert finished and finished[-1]["steps"] == 6, text[-2000:]
    started = next(e for e in events if e["kind"] == "started")
    assert started["replicas"] == 2


def test_install_desktop_writes_a_valid_entry_and_its_icon(venv: Path) -> None:
    validate = shutil.which("desktop-file-validate")
    assert validate, "desktop-file-validate is missing: apt-get install desktop-file-utils"
    assert run([validate, ROOT / "packaging" / "dtgui.desktop"], cwd=ROOT) == ""
    data = venv.parent / "xdg data"
    text = run([venv / "bin" / "dtgui", "install-desktop"], cwd=venv.parent,
               XDG_DATA_HOME=str(data))
    entry = data / "applications" / "dtgui.desktop"
    icon = data / "icons" / "hicolor" / "scalable" / "apps" / "dtgui.svg"
    assert f"wrote {entry}" in text and f"wrote {icon}" in text
    assert run([validate, entry], cwd=venv.parent) == ""
    assert f"Exec={venv / 'bin' / 'dtgui'}\n" in entry.read_text()
    assert "Icon=dtgui\n" in entry.read_text()
    assert icon.read_bytes() == (ROOT / "packaging" / "dtgui.svg").read_bytes()
    assert oct(entry.stat().st_mode & 0o777) == "0o644"
