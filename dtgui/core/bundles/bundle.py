"""Render a plan to a run bundle: the one directory that both the app and Export produce.

See docs/bundle-format.md. Rendering goes to a temporary sibling directory that is
renamed into place at the end, so a failure never leaves a half-written bundle.
"""

from __future__ import annotations

import importlib.metadata
import os
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dtgui.core.bundles.ignore import ProjectFiles, human_size, list_project
from dtgui.core.plans.placement import placed_tf_config_json
from dtgui.core.plans.plan import (
    PLAN_NAME,
    DemoModel,
    ModelFile,
    Plan,
    PlanError,
    TaskSpec,
    validate,
)
from dtgui.core.scripts.script import BUNDLE_PROJECT_DIR
from dtgui.core.scripts.script_bundle import (
    prepare_project,
    script_comment,
    script_environment,
    script_readme_section,
    script_requirements,
    write_project,
)
from dtgui.resources import DEMO_DATA, WORKER_SOURCE
from dtgui.worker import layout
from dtgui.worker.step_timing import BUDGET_VARIABLE, SPLIT_VARIABLE
from dtgui.worker.stop_request import TASK_STOP_SECONDS

WORKER_PACKAGE = "dtgui_worker"
MAX_MODEL_PROJECT_BYTES = 1 << 30  # a model file's folder bigger than this is refused
OUTPUT_DIR = layout.OUTPUT_DIR
SPLIT_VARIABLES = (SPLIT_VARIABLE, BUDGET_VARIABLE)  # passed on to the tasks when set


class BundleError(RuntimeError):
    """The bundle could not be written; the message says why and what to do."""


@dataclass(frozen=True)
class Bundle:
    path: Path
    plan: Plan

    @property
    def output(self) -> Path:
        return self.path / OUTPUT_DIR

    def events_file(self, task: TaskSpec) -> Path:
        return self.path / layout.events_file(task.file_stem)

    def log_file(self, task: TaskSpec) -> Path:
        return self.path / layout.log_file(task.file_stem)

    def pid_file(self, task: TaskSpec) -> Path:
        return self.path / layout.pid_file(task.file_stem)

    def exit_file(self, task: TaskSpec) -> Path:
        return self.path / layout.exit_file(task.file_stem)

    def task_script(self, task: TaskSpec) -> Path:
        return self.path / layout.task_script(task.file_stem)

    @classmethod
    def open(cls, path: str | Path) -> Bundle:
        import json

        plan_file = Path(path) / PLAN_NAME
        try:
            data = json.loads(plan_file.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise BundleError(f"{path} is not a dtgui bundle: it has no plan.json") from exc
        except (OSError, ValueError) as exc:
            raise BundleError(f"{plan_file} cannot be read ({exc}); export the run again") from exc
        return cls(Path(path), Plan.from_dict(data))


def primary_tasks(plan: Plan) -> list[TaskSpec]:
    """Tasks whose exit ends the run; the others are servers that the launcher stops."""
    if plan.strategy.has_coordinator:
        return [t for t in plan.tasks if t.type == "chief"]
    return plan.worker_tasks


def task_command(task: TaskSpec) -> str:
    """The command a task's script executes (its environment is set by the script)."""
    return shlex.join(
        ["python3", "-m", f"{WORKER_PACKAGE}.train", "--plan", PLAN_NAME,
         "--task", task.task_id, "--out", OUTPUT_DIR]
    )


def task_environment(plan: Plan, task: TaskSpec) -> dict[str, str]:
    env: dict[str, str] = {
        "TF_CPP_MIN_LOG_LEVEL": "2",  # TensorFlow's start-up INFO/WARNING noise out of the logs
        "PYTHONUNBUFFERED": "1",  # progress lines reach the log as they are printed
        "PYTHONHASHSEED": str(plan.seed),
    }
    config = placed_tf_config_json(plan, task)
    if config:
        env["TF_CONFIG"] = config
    # GPU numbers come from NVML (PCI bus order); make CUDA number them the same way.
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if task.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in task.gpus)
    elif plan.device_kind == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU plan stays on the CPU even where GPUs exist
    env.update(script_environment(plan, task))  # a user's own training script: its variables
    # the split's switch and budget (docs/performance.md), set where dtgui runs, go with the run
    env.update({k: os.environ[k] for k in SPLIT_VARIABLES if k in os.environ})
    return env


def task_script_text(plan: Plan, task: TaskSpec) -> str:
    lines = [
        "#!/bin/sh",
        f"# Task {task.task_id} of run {plan.run_name} ({plan.strategy.title}).",
        "# Runs in the bundle directory whatever the current directory is.",
        'cd "$(dirname "$0")/.." || exit 1',
        *script_comment(plan),
    ]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in task_environment(plan, task).items()]
    lines.append(
        f'exec "${{PYTHON:-python3}}" -m {WORKER_PACKAGE}.train --plan plan.json '
        f"--task {shlex.quote(task.task_id)} --out {OUTPUT_DIR}"
    )
    return "\n".join(lines) + "\n"


def run_script_text(plan: Plan) -> str:
    stems = [t.file_stem for t in plan.tasks]
    primaries = [t.file_stem for t in primary_tasks(plan)]
    paths = {"task_dirs": " ".join(layout.TASK_DIRS), "script": layout.task_script("$t"),
             "log": layout.log_file("$t"), "pid": layout.pid_file("$t"),
             "events": layout.events_file("<task>"), "all_events": layout.events_file("*"),
             "logs": layout.LOGS_DIR}
    paths["grace"] = str(TASK_STOP_SECONDS)
    if plan.is_multi_machine:  # `bash run.sh MACHINE` runs that machine's tasks
        return _RUN_SH.format(run_name=plan.run_name, tasks="", primaries="", **paths).replace(
            "TASKS=()\nPRIMARIES=()\n", _machine_selection(plan))
    return _RUN_SH.format(
        run_name=plan.run_name,
        tasks=" ".join(shlex.quote(s) for s in stems),
        primaries=" ".join(shlex.quote(s) for s in primaries),
        **paths,
    )


def _machine_selection(plan: Plan) -> str:
    """The bash `case` choosing the tasks of the machine named by $1."""
    primaries = {t.task_id for t in primary_tasks(plan)}
    names = plan.machine_names
    lines = ['MACHINE="${1:-}"', 'case "$MACHINE" in']
    for name in names:
        mine = [t for t in plan.tasks if t.machine_name == name]
        tasks = " ".join(shlex.quote(t.file_stem) for t in mine)
        prim = " ".join(shlex.quote(t.file_stem) for t in mine if t.task_id in primaries)
        lines.append(f"  {shlex.quote(name)}) TASKS=({tasks}); PRIMARIES=({prim}) ;;")
    usage = shlex.quote("usage: bash run.sh MACHINE, on each machine of the run; MACHINE is "
                        "one of: " + " ".join(names))
    lines += [f"  *) echo {usage} >&2; exit 2 ;;", "esac",
              'if [ ${#PRIMARIES[@]} -eq 0 ]; then',
              '  echo "this machine runs servers only: stop them (Ctrl-C) when the chief has '
              'finished"', "fi", ""]
    return "\n".join(lines)


_RUN_SH = """#!/usr/bin/env bash
# Runs every task of run {run_name} on this machine with plain python, and waits.
# PYTHON picks the interpreter (default python3). Events: {events}.
set -u
cd "$(dirname "$0")" || exit 1
export PYTHON="${{PYTHON:-python3}}"
mkdir -p {task_dirs}
TASKS=({tasks})
PRIMARIES=({primaries})
declare -A PID
# Asked to stop, a training task saves a checkpoint at the step it reached (up to {grace} s),
# a server serves on until asked again (the coordinator's checkpoint reads its variables).
wait_groups() {{
  sleep "$1" &
  local grace=$!
  shift
  for t in "$@"; do
    while [ -n "${{PID[$t]:-}}" ] && kill -0 -- "-${{PID[$t]}}" 2>/dev/null \\
        && kill -0 "$grace" 2>/dev/null; do
      sleep 0.05
    done
  done
  kill "$grace" 2>/dev/null
}}
signal_groups() {{
  local sig=$1
  shift
  for t in "$@"; do
    [ -n "${{PID[$t]:-}}" ] && kill "-$sig" -- "-${{PID[$t]}}" 2>/dev/null
  done
}}
stop_all() {{
  signal_groups TERM "${{TASKS[@]}}"
  wait_groups {grace} "${{PRIMARIES[@]}}"
  sleep 0.2  # two signals close together may reach a task as one
  signal_groups TERM "${{TASKS[@]}}"
  wait_groups 5 "${{TASKS[@]}}"
  signal_groups KILL "${{TASKS[@]}}"
  wait 2>/dev/null
}}
trap 'echo "stopping"; stop_all; exit 130' INT TERM
for t in "${{TASKS[@]}}"; do
  setsid sh "{script}" > "{log}" 2>&1 < /dev/null &
  PID[$t]=$!
  echo "${{PID[$t]}}" > "{pid}"
  echo "started $t (pid ${{PID[$t]}})"
done
remaining=${{#PRIMARIES[@]}}
status=0
if [ "$remaining" -eq 0 ]; then wait -n; status=$?; fi
while [ "$remaining" -gt 0 ]; do
  finished=""
  wait -n -p finished
  code=$?
  [ -z "$finished" ] && break
  for t in "${{TASKS[@]}}"; do
    if [ "${{PID[$t]}}" = "$finished" ]; then
      echo "$t exited with $code"
      if [ "$code" -ne 0 ]; then status=$code; remaining=0; break; fi
      for p in "${{PRIMARIES[@]}}"; do [ "$p" = "$t" ] && remaining=$((remaining - 1)); done
    fi
  done
done
stop_all
if [ "$status" -ne 0 ]; then
  echo "run failed (exit $status): see {logs}/ and {all_events}"
else
  echo "run finished"
fi
exit "$status"
"""


def requirements_text() -> str:
    pins = []
    for name in ("tensorflow", "numpy", "psutil"):
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pins.append(name)
    pins.append("nvidia-ml-py  # optional: GPU telemetry")
    return "\n".join(pins) + "\n"


def readme_text(plan: Plan) -> str:
    if plan.is_multi_machine or plan.machines:
        from dtgui.core.bundles.bundle_readme import multi_machine_readme

        return multi_machine_readme(plan, {t.task_id: (task_environment(plan, t), task_command(t))
                                           for t in plan.tasks})
    rows = []
    for task in plan.tasks:
        env = task_environment(plan, task)
        rows.append(f"### {task.task_id}\n\n```sh\n" + "".join(
            f"export {k}={shlex.quote(v)}\n" for k, v in env.items()
        ) + f"{task_command(task)}\n```\n")
    return f"""# dtgui run bundle: {plan.run_name}

Strategy: {plan.strategy.title} — {plan.total_replicas} replica(s), global batch {plan.global_batch},
{plan.steps} steps, precision {plan.precision}, XLA {"on" if plan.xla else "off"}, seed {plan.seed}.

This directory reproduces the run without dtgui.

```sh
python3 -m pip install -r requirements.txt
bash run.sh                 # every task on this machine; PYTHON=/path/to/python to choose one
```

Events are written as JSON lines to `{layout.events_file("<task>")}` (one object a line: `kind`
is started, steps, epoch, device, checkpoint, log, finished or failed; a `steps` event reports
the steps of one training call, every step's loss per replica in a compact form;
`python3 -m dtgui_worker.step_batch {layout.events_file("worker-0")}` prints them as CSV).
Logs: `{layout.LOGS_DIR}/`. Checkpoints: `output/checkpoints/` (a new run in this directory resumes from them; delete `output/` to
start over). TensorBoard: `tensorboard --logdir output/tensorboard`.

## Tasks

Each task is `tasks/<task>.sh`; run from the bundle directory it does the following.

{"".join(rows)}"""


def render_bundle(plan: Plan, destination: Path, *, overwrite: bool = False) -> Bundle:
    """Write the bundle for `plan` at `destination` atomically. Returns the written bundle."""
    problems = validate(plan)
    if problems:
        raise PlanError(" ".join(problems))
    if not plan.tasks:
        raise PlanError("the plan has no tasks: place it first (dtgui.core.plans.placement.place_local)")
    destination = Path(destination).resolve()
    if any(ord(c) < 32 or ord(c) == 127 for c in str(destination)):
        # run.sh finds its folder with "$(dirname "$0")", which drops a trailing line break,
        # and the README's commands are lines: such a path would give a bundle that breaks.
        raise BundleError(
            f"{str(destination)!r} holds a line break or another control character: choose "
            "a directory whose path has none."
        )
    if destination.exists() and any(destination.iterdir()) and not overwrite:
        raise BundleError(
            f"{destination} already exists and is not empty: choose an empty or new directory."
        )
    try:
        plan, project = prepare_model_project(plan)  # a model file's folder
        if project is None:
            plan, project = prepare_project(plan)  # a user's own training script: its folder
    except (OSError, ValueError) as exc:
        raise BundleError(str(exc)) from exc
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
    except OSError as exc:
        raise BundleError(f"cannot write in {destination.parent}: {exc.strerror}") from exc
    try:
        _write_files(plan, staging)
        write_project(staging, project)
        if destination.exists():
            shutil.rmtree(destination)
        staging.rename(destination)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise BundleError(f"writing the bundle to {destination} failed: {exc}") from exc
    return Bundle(destination, plan)


def rewrite_placement(bundle: Bundle, plan: Plan, *, scripts: bool = True) -> Bundle:
    """The bundle's files that say where its tasks run and how far they train (plan.json,
    the README and, with `scripts`, the task scripts and run.sh) written again for `plan`,
    the bundle's own plan placed anew or with other steps (a resume); its code, project,
    data and output stay."""
    problems = validate(plan)
    if problems:
        raise PlanError(" ".join(problems))
    root = bundle.path
    try:
        for task in bundle.plan.tasks if scripts else ():
            (root / layout.task_script(task.file_stem)).unlink(missing_ok=True)
        (root / layout.TASKS_DIR).mkdir(exist_ok=True)
        for task in plan.tasks if scripts else ():
            script = root / layout.task_script(task.file_stem)
            script.write_text(task_script_text(plan, task), encoding="utf-8")
            script.chmod(0o755)
        if scripts:
            (root / "run.sh").write_text(run_script_text(plan), encoding="utf-8")
        (root / "README.md").write_text(readme_text(plan) + script_readme_section(plan),
                                        encoding="utf-8")
        (root / PLAN_NAME).write_text(plan.to_json(), encoding="utf-8")
    except OSError as exc:
        raise BundleError(f"writing the bundle in {root} failed: {exc}") from exc
    return Bundle(root, plan)


def project_of(plan: Plan) -> bool:
    """Whether the plan runs a user's own training script (its project folder is bundled)."""
    return plan.script is not None


def prepare_model_project(plan: Plan) -> tuple[Plan, ProjectFiles | None]:
    """A model file's folder goes into the bundle, so that the file's own modules and data
    files come along (`project` in plan.json's model: the folder, default the file's own).
    Reads the disk: not on a UI thread. Raises BundleError."""
    given = plan.model_file
    if given is None:
        return plan, None
    model_file = Path(given.path).expanduser().resolve()
    if not model_file.is_file():
        raise BundleError(f"model file {model_file} does not exist: choose it again.")
    folder = Path(given.project or model_file.parent).expanduser().resolve()
    if folder not in model_file.parents:
        raise BundleError(f"the model file {model_file} is not inside its project folder "
                          f"{folder}: choose a folder that holds it.")
    listing = list_project(folder)
    relative = model_file.relative_to(folder).as_posix()
    if relative not in listing.files:
        raise BundleError(f"{relative} is left out of the bundle by "
                          f"{listing.rules_from or 'the'} ignore rules: the model file must be "
                          "copied.")
    if listing.total_bytes > MAX_MODEL_PROJECT_BYTES:
        raise BundleError(
            f"the model file's folder {folder} holds {human_size(listing.total_bytes)} to copy "
            "into the bundle: put the model file in a folder of its own project, or list large "
            "data in a .dtguiignore there (and read it from a path on each machine).")
    model = ModelFile(f"{BUNDLE_PROJECT_DIR}/{relative}", BUNDLE_PROJECT_DIR)
    return plan.with_changes(model=model), listing


def _write_files(plan: Plan, root: Path) -> None:
    (root / PLAN_NAME).write_text(plan.to_json(), encoding="utf-8")
    (root / "README.md").write_text(readme_text(plan) + script_readme_section(plan),
                                    encoding="utf-8")
    extra = "".join(f"{pin}\n" for pin in script_requirements()) if project_of(plan) else ""
    (root / "requirements.txt").write_text(requirements_text() + extra, encoding="utf-8")
    run_sh = root / "run.sh"
    run_sh.write_text(run_script_text(plan), encoding="utf-8")
    run_sh.chmod(0o755)
    (root / "tasks").mkdir()
    for task in plan.tasks:
        script = root / "tasks" / f"{task.file_stem}.sh"
        script.write_text(task_script_text(plan, task), encoding="utf-8")
        script.chmod(0o755)
    shutil.copytree(
        WORKER_SOURCE, root / WORKER_PACKAGE, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    if isinstance(plan.model, DemoModel):
        (root / "data").mkdir()
        shutil.copy2(DEMO_DATA, root / "data" / DEMO_DATA.name)
    (root / OUTPUT_DIR).mkdir()
