"""Runs a bundle's tasks on this machine and follows them until the run ends.

The run policy lives in `dtgui.launch.controller.RunController` (one policy over
executors); a local run is that controller with one `LocalExecutor`. `launch_plan` places a
plan on this machine, renders its bundle under the runs directory, records it and starts it.
"""

from __future__ import annotations

import secrets
import shutil
import sys
import time
from pathlib import Path

from dtgui.core.bundle import render_bundle
from dtgui.core.cluster import place_local
from dtgui.core.plan import Plan
from dtgui.core.runs import MachineRecord, RunRecord
from dtgui.launch.controller import LaunchError, RunController
from dtgui.launch.model_check import check_bundled_model
from dtgui.launch.policy import RunPolicy
from dtgui.launch.script_check import check_local

__all__ = ["LaunchError", "RunController", "launch_plan", "unique_run_dir"]


def unique_run_dir(root: Path, name: str) -> Path:
    candidate = root / name
    n = 2
    while candidate.exists():
        candidate = root / f"{name}-{n}"
        n += 1
    return candidate


def new_record(bundle_dir: Path, plan: Plan) -> RunRecord:
    """The run record of a run about to start: its id is unique across machines."""
    return RunRecord(run_id=f"{bundle_dir.name}-{secrets.token_hex(3)}", run_name=plan.run_name,
                     bundle=str(bundle_dir), strategy=plan.strategy, created=time.time())


def launch_plan(plan: Plan, runs_root: Path, python: str | None = None,
                policy: RunPolicy | None = None) -> RunController:
    """Place, render the run's bundle under `runs_root`, and start it. Blocks briefly: call it
    off the UI thread."""
    placed = plan if plan.tasks else place_local(plan)
    problems, notes = check_local(placed, python or sys.executable)  # a user's own script
    if problems:
        raise LaunchError("Not launched: " + " ".join(problems))
    bundle = render_bundle(placed, unique_run_dir(runs_root, placed.run_name))
    problem = check_bundled_model(bundle, python)
    if problem:
        shutil.rmtree(bundle.path, ignore_errors=True)
        raise LaunchError(f"Not launched: {problem}")
    record = new_record(bundle.path, placed)  # the run is listed in the history
    record.machines = [MachineRecord("local", str(bundle.path), python or sys.executable)]
    controller = RunController(bundle, python=python, record=record, policy=policy)
    if notes:
        controller.metrics.add_log_lines(placed.tasks[0].task_id, [f"[dtgui] {n}" for n in notes])
    try:
        controller.start()
    except LaunchError as exc:
        record.end("failed", str(exc), None)
        record.save()
        raise
    return controller
