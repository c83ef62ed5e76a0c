"""Before a user's own script is launched: can it run, and on what, on every machine?

Plan-level (no machine): a Keras 3 `model.fit` under MultiWorkerMirrored / ParameterServer is
refused with both ways out (dtgui.core.scripts.script_scan). Per machine, from the pre-launch check of
its interpreter (dtgui.launch.checks.precheck, with the script's imports asked about): modules the
script imports that are not installed there, tensorboard when the script writes summaries
(TensorFlow 2.21 no longer installs it), and for legacy Keras a tf-keras that is missing or
does not match TensorFlow's version. Notes say which Keras the script gets on each machine;
warnings, with their fix, that code the script gets Keras 3 for calls Keras 2-only names, and
that the script would see fewer devices than the replicas the plan counts.
Reads the disk and runs interpreters: call it off the UI thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dtgui.core.bundles.ignore import list_project
from dtgui.core.plans.plan import Plan
from dtgui.core.scripts.script import ScriptModel
from dtgui.core.scripts.script_scan import (
    ScriptScan,
    devices_warning,
    fit_refusal,
    keras2_warning,
    pip_name,
    scan_project,
)

if TYPE_CHECKING:  # the check (and paramiko with it) is imported only when a script is checked
    from dtgui.launch.checks.precheck import PythonCheck

PROVIDED = frozenset({"dtgui_worker", "__main__"})  # the bundle puts dtgui_worker on the path


@dataclass
class ScriptStudy:
    script: ScriptModel
    scan: ScriptScan
    refusal: str = ""
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # it may fail: each with its fix

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(sorted(self.scan.imports - PROVIDED))


def study(plan: Plan, project: Path | None = None) -> ScriptStudy | None:
    """The static look at a script plan's code (None for other plans). `project`: where the
    code is (default: the plan's project folder)."""
    script = plan.script
    if script is None:
        return None
    root = Path(project or script.project).expanduser()
    listing = list_project(root)
    scan = scan_project(root, listing.files, script.entry)
    result = ScriptStudy(script, scan,
                         fit_refusal(scan, plan.strategy, script.legacy_keras, script.entry))
    result.notes += [f"{e} (not looked at: it does not parse)" for e in scan.errors]
    warnings = (keras2_warning(scan, script.legacy_keras),
                devices_warning(scan, plan.strategy, plan.on_gpu, plan.replicas_per_task,
                                plan.global_batch))
    result.warnings += [w for w in warnings if w]
    return result


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def keras_facts(check: PythonCheck, legacy: bool, tf_version: str) -> tuple[list[str], str]:
    """(problems, note) about the Keras the script gets with this interpreter."""
    machine, python = check.machine, check.python
    tf_keras = check.packages.get("tf-keras", "")
    keras3 = check.packages.get("keras", "")
    if legacy:
        want = f"tf-keras=={tf_version}" if tf_version else "tf-keras"
        if not tf_keras:
            return [f"{machine}: legacy Keras (tf_keras) was chosen but tf-keras is not "
                    f"installed for {python} ({python} -m pip install {want})."], ""
        if tf_version and _minor(tf_keras) != _minor(tf_version):
            return [f"{machine}: tf-keras {tf_keras} does not match TensorFlow {tf_version} "
                    f"({python} -m pip install {want})."], ""
        return [], f"{machine}: the script gets tf_keras {tf_keras} (TF_USE_LEGACY_KERAS=1)."
    also = f"; tf-keras {tf_keras} is installed too" if tf_keras else ""
    return [], f"{machine}: the script gets Keras {keras3 or '(not installed)'}{also}."


def machine_problems(found: ScriptStudy, check: PythonCheck) -> list[str]:
    """What this machine lacks for the script; notes go to `found.notes`."""
    problems: list[str] = []
    python = check.python
    missing = [m for m in check.missing_modules if m not in PROVIDED]
    if missing:
        install = " ".join(sorted({pip_name(m) for m in missing}))
        problems.append(f"{check.machine}: the script imports {', '.join(missing)}, which "
                        f"{python} cannot find there ({python} -m pip install {install}).")
    if found.scan.summary_uses and not check.packages.get("tensorboard"):
        where = found.scan.summary_uses[0]
        problems.append(
            f"{check.machine}: the script writes TensorBoard summaries ({where}: tf.summary or "
            "keras.callbacks.TensorBoard), which need the tensorboard package, no longer "
            f"installed with TensorFlow 2.21 ({python} -m pip install tensorboard).")
    if found.script.data_dir and check.data_dir_found is False:
        problems.append(f"{check.machine}: the data folder {found.script.data_dir} (given as on "
                        "each machine) does not exist there.")
    keras_problems, note = keras_facts(check, found.script.legacy_keras, check.tf_version)
    problems += keras_problems
    if note:
        found.notes.append(note)
    return problems


def check_local(plan: Plan, python: str) -> tuple[list[str], list[str]]:
    """For a run on this machine only: (problems, notes)."""
    found = study(plan)
    if found is None:
        return [], []
    from dtgui.launch.checks.precheck import check_python, expected_tf_version
    from dtgui.remote.commands import LocalRunner

    problems = [found.refusal] if found.refusal else []
    check = check_python("this machine", python, LocalRunner(), expected_tf_version(),
                         import_tf=False, modules=found.modules, data_dir=found.script.data_dir)
    problems += check.problems + machine_problems(found, check)
    return problems, found.notes
