"""Shared test set-up: Qt offscreen, and dtgui's config/data dirs inside a temp dir."""

from __future__ import annotations

import fcntl
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Limits on importing TensorFlow and reading a machine's facts, stretched: other tests' training
# on the same cores can make an import take minutes, and no test proves the default limit (a
# test of a limit gives its own: test_machine_probe.py)
os.environ.setdefault("DTGUI_START_LIMIT_FACTOR", "10")

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


# The SSH test hosts (the `ssh_lab` fixture, session-scoped) are one lab a pytest-xdist worker,
# each with its own test account, subnet and lock (tests/sshhosts.py, LAB_INDEX): their tests
# spread over the workers like any others. The tests of a module that starts a Slurm cluster
# (tests/slurm_cluster.py) run in one worker, in the xdist group "slurm-lab" (`--dist
# loadgroup`): one cluster at a time there rather than one a worker, and the login-node tests
# among them write the machine's /etc/slurm/slurm.conf. The tests of a module that share a
# module-scoped fixture (a wheel built, TensorFlow's summaries written) run in one worker too,
# so that it is made once. Every other test is spread over the workers one by one.
SLURM_LAB_MODULE = "slurm_cluster"


def _imports(path: Path, module: str) -> bool:
    text = path.read_text(encoding="utf-8")
    return f"import {module}" in text or f"from {module} import" in text


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)  # pytest.Function's fixtures, by name
    definitions = getattr(info, "name2fixturedefs", {})
    return any(d.scope == "module" for defs in definitions.values() for d in defs)


# The fixture that starts the SSH test hosts (tests/conftest_ssh.py): a test that needs it, as a
# test of a module that starts the Slurm cluster, is marked `lab` (out of the fast tier).
SSH_LAB_FIXTURE = "ssh_lab"


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    slurm_modules: dict[Path, bool] = {}
    for item in items:
        path = Path(item.path)
        if path not in slurm_modules:
            slurm_modules[path] = _imports(path, SLURM_LAB_MODULE)
        if slurm_modules[path] or SSH_LAB_FIXTURE in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.lab)
        if slurm_modules[path]:
            item.add_marker(pytest.mark.xdist_group("slurm-lab"))
        elif _uses_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(f"fixtures-of-{path.name}"))
    # Workers take the other tests in this order: the slow ones (TensorFlow training) and those
    # on the SSH test hosts (many seconds each, mostly waiting: launches over SSH, a machine's
    # timeouts) first, interleaved, so that one worker waits on a host while the others train
    # (the training alone keeps both cores busy); then the rest, so that the suite ends on
    # short tests and no worker waits long for the last one (docs/testing.md).
    slow = [i for i in items if i.get_closest_marker("slow")
            and not i.get_closest_marker("xdist_group")]
    waiting = [i for i in items if i.get_closest_marker("lab")
               and not i.get_closest_marker("slow") and not i.get_closest_marker("xdist_group")]
    share = {id(item): n / len(kind) for kind in (slow, waiting) for n, item in enumerate(kind)}
    items.sort(key=lambda item: (0, 0.0) if item.get_closest_marker("xdist_group")
               else (1, share[id(item)]) if id(item) in share else (2, 0.0))


# What dtgui remembers from one launch or start to the next, carried from test to test as it
# is for a user (each file's entries): the launch check's TensorFlow imports a machine and
# interpreter (launch-checks.json), this machine's TensorFlow view (tf-view.json).
REMEMBERED = ("launch-checks.json", "tf-view.json")
_remembered: dict[str, dict[str, object]] = {name: {} for name in REMEMBERED}


def _read_checks(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _shared_dir(factory: pytest.TempPathFactory) -> Path | None:
    """Under pytest-xdist, where the workers of this test session share the remembered files
    (the parent of their base temp directories is the session's); None in a single
    process."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return factory.getbasetemp().parent


def _share_checks(shared: Path, found: dict[str, object]) -> None:
    with (shared.parent / "launch-checks.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one worker at a time reads, merges and writes
        merged = {**_read_checks(shared), **found}
        temporary = shared.with_suffix(f".{os.getpid()}")
        temporary.write_text(json.dumps(merged))
        temporary.replace(shared)


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path_factory: pytest.TempPathFactory,
                  monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """dtgui's config and data dirs, new for each test - but for what dtgui remembers from
    launch to launch (REMEMBERED: the interpreters whose TensorFlow imported, this machine's
    TensorFlow view), which carries on as it does for a user: one TensorFlow import a machine
    and interpreter a test session (all its pytest-xdist workers), not one a launch or a
    window."""
    base = tmp_path_factory.mktemp("dtgui-home")
    monkeypatch.setenv("DTGUI_CONFIG_DIR", str(base / "config"))
    monkeypatch.setenv("DTGUI_DATA_DIR", str(base / "data"))
    shared = _shared_dir(tmp_path_factory)
    for name, carried in _remembered.items():
        if shared is not None:
            carried.update(_read_checks(shared / name))
        if carried:
            (base / "data").mkdir(parents=True, exist_ok=True)
            (base / "data" / name).write_text(json.dumps(carried))
    yield base
    for name, carried in _remembered.items():
        found = _read_checks(base / "data" / name)
        if found.keys() - carried.keys():
            carried.update(found)
            if shared is not None:
                _share_checks(shared / name, found)


@pytest.fixture
def stub_python() -> Callable[..., str]:
    """`stub_python(python=..., step_seconds=..., fail=...)`: an interpreter path whose tasks
    train with tests/stub_task.py instead of TensorFlow (runs.stub_python)."""
    import runs

    return runs.stub_python


@pytest.fixture(autouse=True)
def _garbage_collected_on_the_ui_thread() -> Iterator[None]:
    """Once a test made the QApplication, cyclic garbage is collected on this (the UI) thread
    only, as the app does (dtgui.ui.ui_thread_gc); each test's end is one more look, for
    tests that never turn the event loop."""
    from PySide6.QtCore import QThreadPool
    from PySide6.QtWidgets import QApplication

    from dtgui.ui.ui_thread_gc import collect_on_ui_thread

    app = QApplication.instance()
    if app is not None:
        collect_on_ui_thread(app)
    yield
    app = QApplication.instance()
    if app is not None:
        # Work a test's widgets left in the thread pool ends here, not in the next test: a
        # worker reads dtgui's folders when it runs (the next test's, once this one's
        # monkeypatched variables are gone) and would write there.
        QThreadPool.globalInstance().waitForDone(30_000)
        collect_on_ui_thread(app).check()
