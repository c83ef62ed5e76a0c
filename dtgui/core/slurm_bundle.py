"""A run bundle that is also one Slurm job: the ordinary bundle (dtgui.core.bundles.bundle) plus
job.sbatch, slurm.json and a README section saying how to submit it by hand.

The tasks are placed on this machine with free ports as for any bundle, so `bash run.sh`
still runs it here; under Slurm (DTGUI_SLURM_TASKS set by job.sbatch) each task script keeps
the TF_CONFIG that `dtgui_worker.slurm_task` formed from the allocation instead.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from dtgui.core.bundles.bundle import Bundle, BundleError, render_bundle
from dtgui.core.plans.placement import place_local
from dtgui.core.plans.plan import Plan, PlanError, TaskSpec
from dtgui.core.slurm import (
    JOB_FILE,
    JOB_SETTINGS,
    LOCAL_CLUSTER,
    SlurmJob,
    batch_script,
    job_problems,
    readme_section,
)
from dtgui.worker.layout import LOGS_DIR

SLURM_TASKS_VARIABLE = "DTGUI_SLURM_TASKS"  # set by job.sbatch: the task ids by rank


def place_on_cluster(plan: Plan, job: SlurmJob) -> Plan:
    """The plan's tasks in rank order, on the cluster (ports free here for run.sh). No task
    names GPUs: the GPUs are the allocation's (Slurm sets CUDA_VISIBLE_DEVICES on the nodes),
    not this machine's."""
    placed = place_local(plan)
    machine = "" if job.cluster == LOCAL_CLUSTER else job.cluster
    tasks = tuple(TaskSpec(t.type, t.index, t.host, t.port, (), machine)
                  for t in placed.tasks)
    return placed.with_changes(tasks=tasks, machines={})


def slurm_task_script(text: str) -> str:
    """A task script whose TF_CONFIG gives way to Slurm's (set by dtgui_worker.slurm_task)."""
    out = []
    for line in text.splitlines():
        if line.startswith("export TF_CONFIG="):
            line = f'[ -n "${{{SLURM_TASKS_VARIABLE}:-}}" ] || {line}'
        out.append(line)
    return "\n".join(out) + "\n"


def write_slurm_files(bundle: Bundle, job: SlurmJob) -> None:
    """job.sbatch, slurm.json and the README section, into a rendered bundle."""
    plan = bundle.plan
    (bundle.path / LOGS_DIR).mkdir(parents=True, exist_ok=True)  # sbatch writes there at once
    (bundle.path / JOB_FILE).write_text(batch_script(plan, job), encoding="utf-8")
    (bundle.path / JOB_FILE).chmod(0o755)
    (bundle.path / JOB_SETTINGS).write_text(job.to_json(), encoding="utf-8")
    for task in plan.tasks:
        script = bundle.task_script(task)
        script.write_text(slurm_task_script(script.read_text(encoding="utf-8")),
                          encoding="utf-8")
    with open(bundle.path / "README.md", "a", encoding="utf-8") as readme:
        readme.write(readme_section(plan, job))


def render_slurm_bundle(plan: Plan, destination: Path, job: SlurmJob, *,
                        overwrite: bool = False) -> Bundle:
    """The bundle of `plan` as the Slurm job `job`. Raises PlanError (the job does not fit
    the plan), BundleError."""
    placed = place_on_cluster(plan, job)
    problems = job_problems(placed, job)
    if problems:
        raise PlanError(" ".join(problems))
    bundle = render_bundle(placed, destination, overwrite=overwrite)
    try:
        write_slurm_files(bundle, job)
    except OSError as exc:
        shutil.rmtree(bundle.path, ignore_errors=True)
        raise BundleError(f"writing the Slurm job into {bundle.path} failed: {exc}") from exc
    return bundle
