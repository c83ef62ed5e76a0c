"""A static look at a user's training script and its project's modules (ast: nothing is run).

What it finds: the modules imported from outside the project (each machine must have them),
`.fit(` calls, which Keras the code reaches (`import keras`: Keras 3 always; `tf.keras`: Keras
3, or tf_keras when TF_USE_LEGACY_KERAS=1; `import tf_keras`), and whether it writes
TensorBoard summaries (tf.summary, keras.callbacks.TensorBoard), which need the `tensorboard`
package since TensorFlow 2.21. Imports inside `try:` are optional and not required. Calls of
Keras 2-only names (`metric.reset_states()`, `optimizer.get_updates(...)`) are noted: under
Keras 3 they fail when reached. Whether it makes logical CPU devices itself (without them
its MirroredStrategy sees one CPU device, whatever replicas the plan counts).
"""

from __future__ import annotations

import ast
import posixpath
from dataclasses import dataclass, field
from pathlib import Path

from dtgui.worker.strategies import Strategy

# Calls that exist in Keras 2 (tf_keras) only: under Keras 3 they raise AttributeError when
# reached (often after the first epoch). Name -> (what it is, Keras 3's way).
KERAS2_ONLY = {
    "reset_states": ("Metric.reset_states", "reset_state()"),
    "get_updates": ("optimizer.get_updates", "apply_gradients()"),
    "get_gradients": ("optimizer.get_gradients", "tf.GradientTape"),
    "fit_generator": ("Model.fit_generator", "fit()"),
    "evaluate_generator": ("Model.evaluate_generator", "evaluate()"),
    "predict_generator": ("Model.predict_generator", "predict()"),
    "add_update": ("Layer.add_update", "assign in call()"),
    "add_metric": ("Layer.add_metric", "a Metric object"),
    "get_session": ("backend.get_session", "eager TensorFlow"),
}
# Calls that split a physical device into logical ones (tf.config).
DEVICE_CALLS = ("set_logical_device_configuration", "set_virtual_device_configuration")
# Which pip package provides an import name, when they differ.
PIP_NAMES = {"tf_keras": "tf-keras", "yaml": "pyyaml", "sklearn": "scikit-learn",
             "PIL": "pillow", "cv2": "opencv-python"}


@dataclass
class ScriptScan:
    imports: set[str] = field(default_factory=set)  # top-level names from outside the project
    fit_calls: list[str] = field(default_factory=list)  # "file:line"
    keras_imports: set[str] = field(default_factory=set)  # "keras", "tf.keras", "tf_keras"
    summary_uses: list[str] = field(default_factory=list)  # "file:line"
    errors: list[str] = field(default_factory=list)  # files that do not parse
    keras2_calls: list[tuple[str, str]] = field(default_factory=list)  # (name, "file:line")
    files: list[str] = field(default_factory=list)
    logical_devices: list[str] = field(default_factory=list)  # "file:line": it makes devices

    def keras_for_fit(self, legacy: bool) -> str:
        """The Keras a `.fit(` in this code runs on: "keras3", "tf_keras" or ""."""
        if "keras" in self.keras_imports:
            return "keras3"
        if "tf.keras" in self.keras_imports:
            return "tf_keras" if legacy else "keras3"
        return "tf_keras" if "tf_keras" in self.keras_imports else ""


def local_modules(files: list[str], entry: str) -> set[str]:
    """Top-level names the project itself provides: its top-level modules and packages, and
    those beside the entry script (Python puts the script's folder on sys.path)."""
    entry_dir = posixpath.dirname(entry)
    names = set()
    for rel in files:
        if not rel.endswith(".py"):
            continue
        names.add(rel.split("/")[0].removesuffix(".py"))
        if entry_dir and rel.startswith(entry_dir + "/"):
            names.add(rel[len(entry_dir) + 1:].split("/")[0].removesuffix(".py"))
    return names


class _Visitor(ast.NodeVisitor):
    def __init__(self, scan: ScriptScan, name: str) -> None:
        self.scan, self.name, self.optional = scan, name, 0
        self.tf_aliases = {"tensorflow"}
        self.raw: set[str] = set()

    def _where(self, node: ast.AST) -> str:
        return f"{self.name}:{getattr(node, 'lineno', 0)}"

    def visit_Try(self, node: ast.Try | ast.TryStar) -> None:
        self.optional += 1
        for child in node.body:
            self.visit(child)
        self.optional -= 1
        for later in [*node.handlers, *node.orelse, *node.finalbody]:
            self.visit(later)

    visit_TryStar = visit_Try

    def _module(self, module: str, node: ast.AST) -> None:
        top = module.split(".")[0]
        if not self.optional:
            self.raw.add(top)
        if module == "keras" or module.startswith("keras."):
            self.scan.keras_imports.add("keras")
        elif top == "tf_keras":
            self.scan.keras_imports.add("tf_keras")
        elif module.startswith("tensorflow.keras"):
            self.scan.keras_imports.add("tf.keras")
        if module.startswith(("tensorflow.summary", "tensorboard")):
            self.scan.summary_uses.append(self._where(node))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._module(alias.name, node)
            if alias.name == "tensorflow":
                self.tf_aliases.add(alias.asname or "tensorflow")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            return  # relative: the project's own
        self._module(node.module, node)
        for alias in node.names:
            if node.module == "tensorflow" and alias.name == "keras":
                self.scan.keras_imports.add("tf.keras")
            if node.module == "tensorflow" and alias.name == "summary":
                self.scan.summary_uses.append(self._where(node))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and node.value.id in self.tf_aliases:
            if node.attr == "keras":
                self.scan.keras_imports.add("tf.keras")
            elif node.attr == "summary":
                self.scan.summary_uses.append(self._where(node))
        if node.attr == "TensorBoard":
            self.scan.summary_uses.append(self._where(node))
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "TensorBoard":  # from keras.callbacks import TensorBoard
            self.scan.summary_uses.append(self._where(node))

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr == "fit":
            self.scan.fit_calls.append(self._where(node))
        if isinstance(node.func, ast.Attribute) and node.func.attr in DEVICE_CALLS:
            self.scan.logical_devices.append(self._where(node))
        if isinstance(node.func, ast.Attribute) and node.func.attr in KERAS2_ONLY:
            self.scan.keras2_calls.append((node.func.attr, self._where(node)))
        self.generic_visit(node)


def scan_project(project: Path, files: list[str], entry: str) -> ScriptScan:
    """Look at the entry script and every .py file of the project (`files`: as listed for the
    bundle). Reads the disk: not on a UI thread."""
    scan = ScriptScan()
    local = local_modules(files, entry)
    raw: set[str] = set()
    for rel in [entry, *sorted(f for f in files if f.endswith(".py") and f != entry)]:
        try:
            source = (project / rel).read_text(encoding="utf-8", errors="replace")
            tree = ast.parse(source, filename=rel)
        except (OSError, SyntaxError, ValueError) as exc:
            scan.errors.append(f"{rel}: {exc}")
            continue
        visitor = _Visitor(scan, rel)
        visitor.visit(tree)
        raw |= visitor.raw
        scan.files.append(rel)
    scan.imports = {m for m in raw if m not in local and m != "__future__"}
    return scan


def fit_refusal(scan: ScriptScan, strategy: str, legacy: bool, entry: str) -> str:
    """Why a Keras 3 `model.fit` cannot run under this strategy, with both ways out
    ("" when nothing is wrong)."""
    known = Strategy.named(strategy)
    if known is None or not known.fit_needs_legacy_keras or not scan.fit_calls:
        return ""
    if scan.keras_for_fit(legacy) != "keras3":
        return ""
    title = known.title
    where = ", ".join(scan.fit_calls[:3])
    if "keras" in scan.keras_imports:
        how = ("`import keras` always gives Keras 3, even with legacy Keras: use tf.keras "
               "(or `import tf_keras as keras`) in the script and choose legacy Keras "
               "(tf_keras, --legacy-keras)")
    else:
        how = ("choose legacy Keras (tf_keras) for this script (the wizard's checkbox, or "
               "--legacy-keras: TF_USE_LEGACY_KERAS=1)")
    return (f"{entry} calls .fit( ({where}) with Keras 3, whose model.fit fails under {title} "
            "(\"Attempt to convert a value (PerReplica...) to a Tensor\"). Either " + how +
            ", or write the model as a dtgui model file (build_model() and make_dataset()) "
            "and let dtgui's training loop run it.")


def keras2_warning(scan: ScriptScan, legacy: bool) -> str:
    """Why the script may fail under Keras 3 with Keras 2-only calls, and the fix ("" when it
    calls none, or gets Keras 2)."""
    if not scan.keras2_calls or scan.keras_for_fit(legacy) != "keras3":
        return ""  # Keras 2 (tf_keras), or no Keras at all: the names are its own
    found: dict[str, list[str]] = {}
    for name, where in scan.keras2_calls:
        found.setdefault(name, []).append(where)
    calls = "; ".join(f"{KERAS2_ONLY[name][0]} at {', '.join(places[:2])} (Keras 3: "
                      f"{KERAS2_ONLY[name][1]})" for name, places in found.items())
    if "keras" in scan.keras_imports:
        fix = ("`import keras` is Keras 3 whatever the setting: use tf.keras (or `import "
               "tf_keras as keras`) and choose legacy Keras, or use Keras 3's names")
    else:
        fix = ("choose legacy Keras (tf_keras: the wizard's checkbox, or --legacy-keras), "
               "or use Keras 3's names")
    return (f"The script gets Keras 3 but calls Keras 2-only names, which fail when reached: "
            f"{calls}. To fix: {fix}.")


def devices_warning(scan: ScriptScan, strategy: str, on_gpu: bool, replicas: int,
                    global_batch: int) -> str:
    """Why the script would train fewer replicas than the plan counts, with how to give it
    logical CPU devices ("" when it sees as many devices as replicas, or makes them itself).
    On the CPU TensorFlow shows a process one device; dtgui's own loop splits it
    (worker/distribute.py), a script must do it before its strategy is made."""
    known = Strategy.named(strategy)
    if on_gpu or replicas <= 1 or known is None or known.one_replica \
            or known.one_replica_per_worker or known.uses_tpu or scan.logical_devices \
            or known.collective_across_workers:  # one CPU device a worker, whatever it makes
        return ""
    return (f"The plan counts {replicas} replicas per task on the CPU, but TensorFlow shows "
            f"the script one CPU device: its {known.tf_class.split('.')[-1]} would train 1 "
            f"replica while dtgui records {replicas} and passes "
            f"DTGUI_GLOBAL_BATCH={global_batch}. Make the devices "
            "first thing in the script, before the strategy: "
            "tf.config.set_logical_device_configuration(tf.config.list_physical_devices('CPU')"
            "[0], [tf.config.LogicalDeviceConfiguration()] * "
            "int(os.environ['DTGUI_REPLICAS_PER_TASK'])) (docs/own-scripts.md); or choose 1 "
            "replica per task.")


def pip_name(module: str) -> str:
    return PIP_NAMES.get(module, module)
