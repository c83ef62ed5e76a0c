"""The parts of a run bundle that a user's own training script adds (dtgui.core.bundles.bundle calls
these): the project folder's copy, each task's documented variables, the README section.

In the bundle the project is `project/` and plan.json's model says ``"project": "project"``.
Each task's script exports the variables below; the supervisor (dtgui_worker.train) adds the
paths, which depend on where the bundle lies, and runs ``python ENTRY ARGS`` in `project/`.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

from dtgui.core.bundles.ignore import ProjectFiles, copy_project, human_size, list_project
from dtgui.core.plans.plan import Plan, TaskSpec
from dtgui.core.scripts.script import BUNDLE_PROJECT_DIR, ScriptModel, entry_problem

TENSORBOARD_REQUIREMENT = "tensorboard"
TF_KERAS_REQUIREMENT = "tf-keras"


def script_of(plan: Plan) -> ScriptModel | None:
    return plan.script


def prepare_project(plan: Plan) -> tuple[Plan, ProjectFiles | None]:
    """List the project's files (disk: not on a UI thread) and point the plan at its copy.
    Raises ValueError with the reason when the folder or the entry script is missing."""
    script = script_of(plan)
    if script is None:
        return plan, None
    problem = entry_problem(script.project, script.entry)
    if problem:
        raise ValueError(problem)
    listing = list_project(Path(script.project))
    if script.entry not in listing.files:
        raise ValueError(f"{script.entry} is left out of the bundle by {listing.rules_from or 'the'}"
                         " ignore rules: the entry script must be copied.")
    return plan.with_changes(model=replace(script, project=BUNDLE_PROJECT_DIR)), listing


def write_project(root: Path, listing: ProjectFiles | None) -> None:
    if listing is not None:
        copy_project(listing, root / BUNDLE_PROJECT_DIR)


def script_environment(plan: Plan, task: TaskSpec) -> dict[str, str]:
    """The variables a script task's shell script exports (docs/own-scripts.md)."""
    script = script_of(plan)
    if script is None:
        return {}
    computing = plan.strategy.holds_replicas(task.type)
    env = {
        "DTGUI_TASK": task.task_id,
        "DTGUI_TASK_TYPE": task.type,
        "DTGUI_TASK_INDEX": str(task.index),
        "DTGUI_STRATEGY": str(plan.strategy),
        "DTGUI_NUM_WORKERS": str(plan.compute_tasks),
        "DTGUI_DEVICE_KIND": str(plan.device_kind),
        "DTGUI_REPLICAS_PER_TASK": str(plan.replicas_per_task if computing else 0),
        "DTGUI_PER_REPLICA_BATCH": str(plan.per_replica_batch),
        "DTGUI_GLOBAL_BATCH": str(plan.global_batch),
        "DTGUI_STEPS": str(plan.steps),
        "DTGUI_STEPS_PER_EPOCH": str(plan.steps_per_epoch),
        "DTGUI_EPOCHS": str(max(1, -(-plan.steps // plan.steps_per_epoch))),
        "DTGUI_LEARNING_RATE": repr(float(plan.learning_rate)),
        "DTGUI_SEED": str(plan.seed),
        "DTGUI_PRECISION": str(plan.precision),
        "DTGUI_XLA": "1" if plan.xla else "0",
        "DTGUI_CHECKPOINT_EVERY": str(plan.checkpoint_every),
    }
    if script.data_dir:
        env["DTGUI_DATASET_DIR"] = script.data_dir
    if script.legacy_keras:
        env["TF_USE_LEGACY_KERAS"] = "1"  # read when TensorFlow is imported: set before
    env.update(script.env)
    return env


def script_comment(plan: Plan) -> list[str]:
    """Comment lines for a task's shell script: what its supervisor runs."""
    script = script_of(plan)
    if script is None:
        return []
    return [f"# The supervisor below runs your script: cd {BUNDLE_PROJECT_DIR} && "
            f"$PYTHON {shlex.join([script.entry, *script.args])}"]


def script_requirements() -> list[str]:
    import importlib.metadata

    pins = []
    for name in (TENSORBOARD_REQUIREMENT, TF_KERAS_REQUIREMENT):
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pins.append(name)
    return pins


def script_readme_section(plan: Plan) -> str:
    script = script_of(plan)
    if script is None:
        return ""
    keras = ("legacy Keras (tf_keras: TF_USE_LEGACY_KERAS=1 is set for every task)"
             if script.legacy_keras else "the Keras TensorFlow imports (Keras 3)")
    return f"""
## Your training script

Every task runs, through the supervisor `python3 -m dtgui_worker.train` (which handles
stop signals, device telemetry and the events), in `{BUNDLE_PROJECT_DIR}/`:

```sh
cd {BUNDLE_PROJECT_DIR} && "$PYTHON" {shlex.join([script.entry, *script.args])}
```

with the task's variables from `tasks/<task>.sh` plus `DTGUI_RUN_DIR` (this directory),
`DTGUI_PROJECT_DIR`, `DTGUI_OUTPUT_DIR` (`output/script/<task>/`), `DTGUI_TENSORBOARD_DIR`
(`output/tensorboard/<task>/`), `DTGUI_CHECKPOINT_DIR` (`output/checkpoints/`, the same for
every task) and `DTGUI_EVENTS_FILE`; `$DTGUI_...` in an argument or a variable's value is
replaced by its value. The script gets {keras}. The scalars it writes as TensorBoard event
files under `DTGUI_TENSORBOARD_DIR` or `DTGUI_OUTPUT_DIR` become `scalar` events
(`tensorboard --logdir output/tensorboard` shows them too). `dtgui_worker` is on PYTHONPATH:
`from dtgui_worker import report` adds per-replica losses.
"""


def project_summary(listing: ProjectFiles) -> str:
    text = f"{len(listing.files)} file(s), {human_size(listing.total_bytes)}"
    if listing.skipped:
        text += "; left out: " + ", ".join(listing.skipped[:6])
        if len(listing.skipped) > 6:
            text += f" and {len(listing.skipped) - 6} more"
    return text
