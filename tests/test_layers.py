"""The layering rules: no Qt or TensorFlow in the core, no TensorFlow in the GUI process."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

FORBIDDEN_IN_CORE = {"PySide6", "pyqtgraph", "tensorflow", "keras", "paramiko"}
FORBIDDEN_IN_GUI = {"tensorflow", "keras"}

# dtgui's own layers, bottom first: a layer imports its own modules and those below it only.
LAYERS = ("core", "remote", "launch", "ui")
# The TensorFlow-free parts of the training program that the GUI process shares (the event
# encoding of step batches, the size of a call, a user's script's paths, variable references
# and loss tags, the plan (its model and option sets) and the strategy catalogue, the machine
# probe: ports, system, GPUs; the model check's command and answer; the bundle's output layout
# and task wrapper, the TF_CONFIG builder and the Slurm task's rank layout; the TFRecord
# framing of TensorBoard files, which a run's HParams summary is written with);
# the rest of dtgui.worker imports TensorFlow.
SHARED_WORKER_MODULES = {"dtgui.worker.step_batch", "dtgui.worker.call_size",
                         "dtgui.worker.script_env", "dtgui.worker.plan",
                         "dtgui.worker.plan_options", "dtgui.worker.plan_model",
                         "dtgui.worker.strategies", "dtgui.worker.machine_probe",
                         "dtgui.worker.printed_metrics", "dtgui.worker.model_check_result",
                         "dtgui.worker.layout", "dtgui.worker.tf_config",
                         "dtgui.kinds.slurm.task", "dtgui.worker.stop_request",
                         "dtgui.worker.profile_request",
                         "dtgui.worker.step_timing", "dtgui.worker.tfrecord",
                         "dtgui.worker.checkpoint_index"}
# Where dtgui's files are (it imports nothing of dtgui).
SHARED_MODULES = {"dtgui.resources"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _is_module(root: Path, name: str) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def dtgui_imports(root: Path, path: Path) -> set[str]:
    """The dtgui modules a file imports, anywhere in it (also inside functions and
    TYPE_CHECKING blocks), relative imports resolved; `from pkg import mod` is pkg.mod."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    package = parts if parts[-1] == "__init__" else parts[:-1]
    package = [p for p in package if p != "__init__"]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            for alias in node.names:
                child = f"{module}.{alias.name}"
                found.add(child if _is_module(root, child) else module)
    return {m for m in found if m == "dtgui" or m.startswith("dtgui.")}


# A kind's package (dtgui/kinds/KIND/) holds modules of every layer; a module's name says its
# layer (a name not listed is core, as the registration in its __init__). `task` is its part of
# the task program, copied into bundles beside the worker package: stdlib and the shared
# worker modules only. `cli` is its command-line options (the command line's layer: above
# launch, without Qt). The registry (dtgui/kinds/__init__.py) is core.
KIND_MODULE_LAYERS = {"box": "ui", "fields": "ui", "driver": "launch", "executor": "launch",
                      "remote": "remote", "cli": "cli", "task": "task"}
KIND_LAYER_ALLOWS = {"core": {"core"}, "remote": {"core", "remote"},
                     "launch": {"core", "remote", "launch"},
                     "ui": {"core", "remote", "launch", "ui"},
                     "cli": {"core", "remote", "launch", "cli"}, "task": set()}


def kind_module_layer(name: str) -> str:
    """The layer of a kind package's module, by its name (executor_ssh: an executor)."""
    return KIND_MODULE_LAYERS.get(name.split("_")[0], "core")


def _kind_import_problem(root: Path, path: Path, module: str) -> str:
    """Why a module of a kind's package may not import `module` ("" = it may)."""
    own = path.relative_to(root / "dtgui" / "kinds").parts[0]
    layer = kind_module_layer(path.stem)
    allowed = KIND_LAYER_ALLOWS[layer]
    if module in SHARED_MODULES | SHARED_WORKER_MODULES or module == "dtgui.kinds":
        return ""
    parts = module.split(".")
    if parts[1] == "kinds":
        if len(parts) < 3 or parts[2] != own:
            return "another kind's package"
        other = kind_module_layer(parts[3]) if len(parts) > 3 else "core"
        # its task module is TensorFlow-free: every layer may read it (rank layouts)
        return "" if other in allowed | {layer, "task"} else f"its {other} module"
    return "" if parts[1] in allowed else f"the {parts[1]} layer"


def layer_violations(root: Path) -> list[str]:
    problems = []
    for rank, layer in enumerate(LAYERS):
        allowed = {f"dtgui.{below}" for below in LAYERS[: rank + 1]}
        for path in sorted((root / "dtgui" / layer).rglob("*.py")):
            for module in sorted(dtgui_imports(root, path)):
                top = ".".join(module.split(".")[:2])
                if top in allowed or module in SHARED_MODULES | SHARED_WORKER_MODULES \
                        or module == "dtgui.kinds":  # the registry, asked by every layer
                    continue
                problems.append(f"{path.relative_to(root)} ({layer}) imports {module}")
    for path in sorted((root / "dtgui" / "kinds").glob("*/*.py")):
        for module in sorted(dtgui_imports(root, path)):
            why = _kind_import_problem(root, path, module)
            if why:
                layer = kind_module_layer(path.stem)
                problems.append(f"{path.relative_to(root)} (kind {layer}) imports {module}")
    layered = [root / "dtgui" / layer for layer in LAYERS]
    for path in sorted((root / "dtgui").rglob("*.py")):  # a kind's package is its own
        if any(path.is_relative_to(d) for d in layered) or (
                path.is_relative_to(root / "dtgui" / "kinds")
                and path.parent != root / "dtgui" / "kinds"):
            continue
        for module in sorted(dtgui_imports(root, path)):
            if module.startswith("dtgui.kinds.") or (path.parent == root / "dtgui" / "kinds"
                                                     and not _core_module(module)):
                problems.append(f"{path.relative_to(root)} imports {module}")
    return problems


def _core_module(module: str) -> bool:
    return module.split(".")[1] == "core" or module in SHARED_WORKER_MODULES


def test_imports_point_down_only() -> None:
    """ui -> launch -> remote -> core (and core -> the TensorFlow-free worker modules)."""
    assert layer_violations(ROOT) == []
    for name in SHARED_MODULES:
        path = ROOT.joinpath(*name.split("."))
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        assert not dtgui_imports(ROOT, path), f"{name} imports dtgui"


def write_files(root: Path, files: dict[str, str]) -> None:
    """Each file (its path below `root`: its text) written, its folders made."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_import_rule_sees_every_kind_of_import(tmp_path: Path) -> None:
    write_files(tmp_path, {f"dtgui/{layer}/__init__.py": ""
                           for layer in (*LAYERS, "worker", "ui/wizard")})
    write_files(tmp_path, {
        "dtgui/worker/step_batch.py": "",
        "dtgui/worker/train.py": "",
        "dtgui/core/ok.py": "from dtgui.worker import step_batch\nimport dtgui.core.ok\n",
        "dtgui/core/up.py": "def later() -> None:\n    from dtgui.ui import app\n",
        "dtgui/core/tf.py": "from dtgui.worker import train\n",
        "dtgui/remote/typing_only.py":
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import dtgui.launch.x\n",
        "dtgui/ui/wizard/page.py": "from .. import app\n",
        "dtgui/launch/rel.py": "from ..ui import window\n",
    })
    assert layer_violations(tmp_path) == [
        "dtgui/core/tf.py (core) imports dtgui.worker.train",
        "dtgui/core/up.py (core) imports dtgui.ui",
        "dtgui/remote/typing_only.py (remote) imports dtgui.launch.x",
        "dtgui/launch/rel.py (launch) imports dtgui.ui",
    ]


def test_kind_packages_keep_the_layers_by_module_name(tmp_path: Path) -> None:
    """A kind's module imports only the layers at or below its own (told by its name), its
    own package's modules of those layers and its task module; nothing outside the kind's
    package imports it (the registry, `dtgui.kinds`, is every layer's)."""
    write_files(tmp_path, {f"dtgui/{layer}/__init__.py": "" for layer in (*LAYERS, "worker")})
    write_files(tmp_path, {
        "dtgui/kinds/__init__.py": "from dtgui.core import x\n",
        "dtgui/kinds/pool/__init__.py": "from dtgui.kinds import Kind\n",
        "dtgui/kinds/pool/job.py": "from dtgui.kinds.pool import task\nfrom dtgui.launch import y\n",
        "dtgui/kinds/pool/task.py": "from dtgui.core import z\n",
        "dtgui/kinds/pool/driver.py": "from dtgui.kinds.pool.job import J\nfrom dtgui.ui import w\n",
        "dtgui/kinds/pool/box.py": "from dtgui.kinds.pool.driver import D\nfrom dtgui.ui import w\n",
        "dtgui/kinds/pool/remote.py": "from dtgui.kinds.pool.driver import D\n",
        "dtgui/kinds/other/job.py": "from dtgui.kinds.pool.job import J\n",
        "dtgui/launch/uses.py": "from dtgui.kinds import hooks\nfrom dtgui.kinds.pool import job\n",
    })
    assert layer_violations(tmp_path) == [
        "dtgui/launch/uses.py (launch) imports dtgui.kinds.pool.job",
        "dtgui/kinds/other/job.py (kind core) imports dtgui.kinds.pool.job",
        "dtgui/kinds/pool/driver.py (kind launch) imports dtgui.ui",
        "dtgui/kinds/pool/job.py (kind core) imports dtgui.launch",
        "dtgui/kinds/pool/remote.py (kind remote) imports dtgui.kinds.pool.driver",
        "dtgui/kinds/pool/task.py (kind task) imports dtgui.core",
    ]


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_circles(root: Path) -> list[list[str]]:
    """Every import circle among dtgui's modules (imports anywhere in a file, as
    `dtgui_imports` collects them), each as its modules in order; [] when there is none."""
    graph = {module_name(root, p): dtgui_imports(root, p)
             for p in sorted((root / "dtgui").rglob("*.py"))}
    circles: list[list[str]] = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []

    def visit(name: str) -> None:  # Tarjan's strongly connected components
        index[name] = low[name] = len(index)
        stack.append(name)
        for other in sorted(graph.get(name, set()) - {name}):
            if other not in graph:
                continue
            if other not in index:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in stack:
                low[name] = min(low[name], index[other])
        if low[name] == index[name]:
            members = []
            while True:
                member = stack.pop()
                members.append(member)
                if member == name:
                    break
            if len(members) > 1:
                circles.append(sorted(members))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return circles


def test_no_module_imports_itself_back() -> None:
    """No import circle in dtgui, however long, with imports at module level, inside
    functions or for type checking alike."""
    assert import_circles(ROOT) == []


def test_the_circle_rule_sees_circles_through_functions_and_type_checking(
        tmp_path: Path) -> None:
    write_files(tmp_path, {
        "dtgui/__init__.py": "",
        "dtgui/core/__init__.py": "",
        "dtgui/worker/__init__.py": "",
        "dtgui/core/a.py": "from dtgui.core import b\n",
        "dtgui/core/b.py": "def later() -> None:\n    from dtgui.core.c import x\n",
        "dtgui/core/c.py":
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dtgui.core.a import y\n",
        "dtgui/core/alone.py": "import dtgui.core.alone\n",
        "dtgui/worker/one.py": "from .two import x\n",
        "dtgui/worker/two.py": "from . import one\n",
    })
    assert import_circles(tmp_path) == [["dtgui.core.a", "dtgui.core.b", "dtgui.core.c"],
                                        ["dtgui.worker.one", "dtgui.worker.two"]]


def room_of(package: str, module: str) -> str:
    """The room of `package` a module is in: its subpackage, or the module itself when it
    lies at the package's top."""
    return ".".join(module.split(".")[: package.count(".") + 2])


def room_circles(root: Path, package: str) -> list[list[str]]:
    """Import circles among the rooms of `package` (its subpackages, and each module at its
    top), each as its rooms sorted; [] exactly when the rooms import one way only."""
    edges: dict[str, set[str]] = {}
    folder = root.joinpath(*package.split("."))
    for path in sorted(folder.rglob("*.py")):
        module = module_name(root, path)
        if module == package:
            continue
        for other in dtgui_imports(root, path):
            if other.startswith(package + ".") and \
                    room_of(package, other) != room_of(package, module):
                edges.setdefault(room_of(package, module), set()).add(room_of(package, other))
    circles: list[list[str]] = []
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        for other in sorted(edges.get(name, set())):
            if other in path:
                circle = path[path.index(other):]
                if sorted(circle) not in circles:
                    circles.append(sorted(circle))
            elif other not in done:
                visit(other, [*path, other])
        done.add(name)

    for name in sorted(edges):
        if name not in done:
            visit(name, [name])
    return circles


def test_the_launch_layers_rooms_import_one_way() -> None:
    """dtgui/launch's rooms (docs/architecture.md lists them bottom first) import one way:
    no circle between two subpackages, nor between a subpackage and a top-level module."""
    assert room_circles(ROOT, "dtgui.launch") == []


def test_the_room_rule_sees_circles_between_rooms(tmp_path: Path) -> None:
    write_files(tmp_path, {
        "dtgui/__init__.py": "",
        "dtgui/launch/__init__.py": "from dtgui.launch.runs import a\n",
        "dtgui/launch/runs/__init__.py": "",
        "dtgui/launch/runs/a.py": "def later() -> None:\n    from dtgui.launch.start import b\n",
        "dtgui/launch/runs/c.py": "",
        "dtgui/launch/start/__init__.py": "",
        "dtgui/launch/start/b.py": "from dtgui.launch import top\n",
        "dtgui/launch/top.py": "from dtgui.launch.runs.c import x\n",
        "dtgui/launch/alone.py": "from dtgui.launch.runs import c\n",
        "dtgui/launch/exec/__init__.py": "",
        "dtgui/launch/exec/d.py": "from dtgui.launch.exec import e\n",
        "dtgui/launch/exec/e.py": "from dtgui.launch import alone\n",
    })
    assert import_circles(tmp_path) == []  # no circle between modules: only between rooms
    assert room_circles(tmp_path, "dtgui.launch") == [
        ["dtgui.launch.runs", "dtgui.launch.start", "dtgui.launch.top"]]


def kind_files(layers: set[str]) -> list[Path]:
    """The modules of the kinds' packages in these layers (the registry is core)."""
    found = [p for p in (ROOT / "dtgui" / "kinds").glob("*/*.py")
             if kind_module_layer(p.stem) in layers]
    return found + ([ROOT / "dtgui" / "kinds" / "__init__.py"] if "core" in layers else [])


def test_core_imports_neither_qt_nor_tensorflow() -> None:
    files = list((ROOT / "dtgui" / "core").rglob("*.py")) + kind_files({"core", "task"})
    assert files
    for path in files:
        bad = imported_modules(path) & FORBIDDEN_IN_CORE
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_ui_and_launch_never_import_tensorflow_statically() -> None:
    for layer in ("ui", "launch", "remote"):
        for path in (ROOT / "dtgui" / layer).rglob("*.py"):
            bad = imported_modules(path) & FORBIDDEN_IN_GUI
            assert not bad, f"{path.relative_to(ROOT)} imports {bad}"
    for path in (ROOT / "dtgui" / "kinds").rglob("*.py"):  # every kind module of every layer
        bad = imported_modules(path) & FORBIDDEN_IN_GUI
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"
        if kind_module_layer(path.stem) not in ("ui", "cli"):
            qt = imported_modules(path) & {"PySide6", "pyqtgraph"}
            assert not qt, f"{path.relative_to(ROOT)} imports {qt}: Qt only in box/fields"


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
        "import dtgui.cli, dtgui.core.bundles.bundle, dtgui.launch.start.pipeline\n"
        "bad = sorted(m for m in list(sys.modules) if m.split('.')[0] in ('tensorflow', 'keras'))\n"
        "print('LOADED', bad)\n"
        "wiz.close(); w.close()\n"
        "sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**__import__("os").environ,
                                                      "QT_QPA_PLATFORM": "offscreen"})
    assert proc.returncode == 0, proc.stdout + proc.stderr


DEFERRED_AT_START = ("paramiko", "keyring", "pyqtgraph", "numpy", "pathspec", "optuna",
                     "dtgui.core.bundles.bundle", "dtgui.core.events", "dtgui.core.live_run",
                     "dtgui.launch.runs.history")


def test_the_main_window_module_loads_without_ssh_or_plotting() -> None:
    """The window paints before the machines panel (paramiko, keyring) and the dashboard
    (pyqtgraph) are built, and before anything reads a run or writes a bundle (numpy,
    pathspec): importing it must not bring them (docs/performance.md lists what it does)."""
    code = ("import sys\n"
            "import dtgui.ui.main_window\n"
            f"bad = sorted(m for m in {DEFERRED_AT_START!r} if m in sys.modules)\n"
            "print('LOADED', bad)\n"
            "sys.exit(1 if bad else 0)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**__import__("os").environ,
                                                      "QT_QPA_PLATFORM": "offscreen"})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_script_supervisor_and_its_tensorboard_reader_never_load_tensorflow(
        tmp_path: Path) -> None:
    """The supervisor follows a script's TensorBoard files without TensorFlow (tensorboard's
    compiled protos are fine: they need only protobuf)."""
    code = (
        "import sys\n"
        "from dtgui.worker import script_child, supervisor, tb_follow, tfrecord, reporting\n"
        "from tensorboard.util import tensor_util  # other dtypes than float32\n"
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
    assert "decode_event" in proc.stdout  # tensorboard's protos were used, without TensorFlow


# Names that several modules define with one meaning by design, each with why. Methods are not
# module-level, so a protocol's methods, their implementations and Qt's overrides never count.
SAME_MEANING = {
    "main": "the entry point of a module run as a program (`python -m ...`, a bundle's task, "
            "the `dtgui` command); each such module ends in `if __name__ == \"__main__\"`",
}


def _module_level(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    """The functions and classes a module defines at its top (also under a module-level `if`,
    `try` or `with`), not those inside a function or a class."""
    found: list[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append(node)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            pending.extend(child for child in ast.iter_child_nodes(node)
                           if isinstance(child, ast.stmt))
            if isinstance(node, ast.Try):
                pending.extend(s for handler in node.handlers for s in handler.body)
    return found


def name_clashes(root: Path) -> list[str]:
    """Every module-level function or class name that two modules of dtgui define, but those
    of SAME_MEANING, each as "name: module, module"."""
    defined: dict[str, set[str]] = {}
    for path in sorted((root / "dtgui").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in _module_level(tree):
            defined.setdefault(node.name, set()).add(module_name(root, path))
    return [f"{name}: {', '.join(sorted(modules))}" for name, modules in sorted(defined.items())
            if len(modules) > 1 and name not in SAME_MEANING]


def test_one_meaning_per_name() -> None:
    """A function or class name means one thing across dtgui: two modules that need the same
    name for different jobs rename one; two that do the same job share one definition."""
    assert name_clashes(ROOT) == []


def test_every_module_defining_main_runs_as_a_program() -> None:
    """`main` is shared only as the entry point of a module run as a program."""
    for path in sorted((ROOT / "dtgui").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(node.name == "main" for node in _module_level(tree)):
            assert 'if __name__ == "__main__"' in path.read_text(encoding="utf-8"), path


def test_the_name_rule_sees_module_level_names_only(tmp_path: Path) -> None:
    for package in ("core", "worker"):
        (tmp_path / "dtgui" / package).mkdir(parents=True)
        (tmp_path / "dtgui" / package / "__init__.py").write_text("")
    (tmp_path / "dtgui" / "core" / "a.py").write_text(
        "def probe() -> None: ...\nclass Cluster: ...\ndef main() -> None: ...\n"
        "class Box:\n    def run(self) -> None: ...\n")
    (tmp_path / "dtgui" / "core" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    class Cluster: ...\n"
        "def main() -> None:\n    def probe() -> None: ...\n"
        "def run() -> None: ...\n")
    (tmp_path / "dtgui" / "worker" / "c.py").write_text(
        "try:\n    def probe() -> None: ...\nexcept ImportError:\n    def probe() -> None: ...\n")
    assert name_clashes(tmp_path) == ["Cluster: dtgui.core.a, dtgui.core.b",
                                      "probe: dtgui.core.a, dtgui.worker.c"]
