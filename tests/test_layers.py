"""The layering rules: no Qt or TensorFlow in the core, no TensorFlow in the GUI process."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

FORBIDDEN_IN_CORE = {"PySide6", "pyqtgraph", "tensorflow", "keras", "paramiko"}
FORBIDDEN_IN_GUI = {"tensorflow", "keras"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_core_imports_neither_qt_nor_tensorflow() -> None:
    files = list((ROOT / "dtgui" / "core").rglob("*.py"))
    assert files
    for path in files:
        bad = imported_modules(path) & FORBIDDEN_IN_CORE
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_ui_and_launch_never_import_tensorflow_statically() -> None:
    for layer in ("ui", "launch", "remote"):
        for path in (ROOT / "dtgui" / layer).rglob("*.py"):
            bad = imported_modules(path) & FORBIDDEN_IN_GUI
            assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_worker_uses_only_relative_imports_of_its_own_package() -> None:
    for path in (ROOT / "dtgui" / "worker").rglob("*.py"):
        assert "dtgui" not in imported_modules(path), f"{path.name} imports dtgui absolutely"


def test_gui_process_never_loads_tensorflow() -> None:
    code = (
        "import sys\n"
        "from dtgui.ui.app import make_app\n"
        "app = make_app([])\n"
        "from dtgui.ui.main_window import MainWindow\n"
        "from dtgui.ui.wizard import RunWizard\n"
        "w = MainWindow(); w.show(); app.processEvents()\n"
        "wiz = RunWizard(None, None, w); wiz.show(); app.processEvents()\n"
        "import dtgui.cli, dtgui.core.bundle, dtgui.launch.local_run\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras'))\n"
        "print('LOADED', bad)\n"
        "wiz.close(); w.close()\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**__import__("os").environ,
                                                      "QT_QPA_PLATFORM": "offscreen"})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_script_supervisor_and_its_tensorboard_reader_never_load_tensorflow(tmp_path) -> None:
    """The supervisor follows a script's TensorBoard files without TensorFlow (tensorboard's
    compiled protos are fine: they need only protobuf)."""
    code = (
        "import sys\n"
        "from dtgui.worker import script_supervisor, tb_follow, tfrecord, reporting\n"
        "decode = tfrecord.event_decoder()\n"
        "f = tb_follow.TensorBoardFollower([sys.argv[1]], lambda tag, s: None)\n"
        "f.poll_once()\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras',\n"
        "                                                            'tf_keras'))\n"
        "print('LOADED', bad, decode.__qualname__)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "_proto_event" in proc.stdout  # tensorboard's protos were used, without TensorFlow
