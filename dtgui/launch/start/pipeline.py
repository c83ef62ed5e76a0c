"""The one launch pipeline, for every kind of target, and the reattach.

`launch_plan(plan, ...)` runs the named steps of `STEPS`, in order. Each step acts on every
target it applies to, in parallel over the machines (`dtgui.remote.parallel`), and is skipped
where it applies to none: a run on this machine alone connects to nothing, checks nothing but
a user's own script, and copies nothing. What a step does on a target is its kind's driver's
(`dtgui.launch.drivers`): the pipeline never asks which kind a target is.

    connect      every target reached over SSH (host keys verified)
    check        each target as its driver checks it, one round trip a machine (this
                 machine, SSH machines: Python and TensorFlow, the run directory, free ports
                 or the plan's ports bind-tested, a user's script's imports; a batch job:
                 the scheduler's partitions), then the TensorFlow versions agree
    place        the tasks on their machines with those ports (the targets' drivers' one
                 placement; a kind whose run takes no other machine refuses others)
    render       the bundle under the runs directory, with each driver's own files
    check model  a model file imported from the bundle in a TensorFlow subprocess
    record       the run record (the history lists the run from now on) and one executor a
                 target, as its driver makes it
    upload       the bundle copied to every target reached over SSH
    start        every task (a batch scheduler: the job submitted), then the run policy watches
                 (`RunController`)

`launch_bundle(bundle, ...)` runs the same steps but place, render and check model on a
bundle rendered already (`dtgui run BUNDLE`). Nothing is started unless every machine passed
every check, and the reasons are reported together; a failure once the record is written
marks it failed, and what a launch that did not start made on a target is removed (its
driver's `cleanup`). `reattach(record)` follows a recorded run again, with the same connect
step and the same drivers' executors; `dtgui.launch.start.resume.resume_run` continues an ended
one from its checkpoint with these steps.

Everything here blocks (for seconds when other machines take part): call it off the UI thread.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dtgui.core.bundles.bundle import Bundle, render_bundle
from dtgui.core.bundles.bundle_manifest import write_manifest
from dtgui.core.machines.registry import MachineRegistry
from dtgui.core.plans.placement import task_layout
from dtgui.core.plans.plan import LOCAL_MACHINE, Plan, PlanError
from dtgui.core.runs.records import RunRecord
from dtgui.core.runs.run_state import RunState
from dtgui.core.scripts.script import BUNDLE_PROJECT_DIR
from dtgui.core.settings import runs_dir
from dtgui.launch.checks.model_check import check_bundled_model
from dtgui.launch.checks.script_check import study
from dtgui.launch.controller import LaunchError, RunController
from dtgui.launch.drivers import (
    Refused,
    bundle_targets,
    driver_for,
    local_target,
    target_of_record,
)
from dtgui.launch.exec.executor import Executor
from dtgui.launch.exec.host import bundle_archive, this_process
from dtgui.launch.launch_state import (
    Launch,
    LaunchProgress,
    UnknownMachine,
    default_connector,
    unique_run_dir,
)
from dtgui.launch.runs.policy import RunPolicy
from dtgui.launch.targets import Target

if TYPE_CHECKING:  # paramiko is imported only when a step needs it (not for this machine)
    from dtgui.remote.connection import SSHClient
    from dtgui.remote.connector import Connector

__all__ = ["BUNDLE_STEPS", "STEPS", "LaunchError", "LaunchProgress", "Step", "Target",
           "launch_bundle", "launch_plan", "reattach"]


def connect_targets(targets: Sequence[Target], connector: Connector,
                    failure: str) -> dict[str, SSHClient]:
    """Connect every target that needs a connection, all at once: name -> client. When one
    cannot be reached, the others are closed and LaunchError(`failure`: every reason) is
    raised."""
    remote = [t for t in targets if t.needs_connection and t.machine is not None]
    results = connector.connect_all([t.machine for t in remote if t.machine is not None])
    clients = {t.name: r for t, r in zip(remote, results, strict=True)
               if not isinstance(r, Exception)}
    errors = [f"{t.name}: {r}" for t, r in zip(remote, results, strict=True)
              if isinstance(r, Exception)]
    if errors:
        for client in clients.values():
            client.close()
        raise LaunchError(f"{failure}: " + " ".join(errors))
    return clients


def checked(launch: Launch) -> list[Target]:
    """The targets the check step runs on (as their drivers say)."""
    return [t for t in launch.targets if driver_for(t).checks(launch, t)]


def local_python(launch: Launch) -> str:
    """This machine's interpreter for the run (the model check runs it here)."""
    return next((t.interpreter for t in launch.targets if t.starts_processes_here),
                sys.executable)


# -- the steps ------------------------------------------------------------------------------
def _connect(launch: Launch) -> None:
    launch.progress(f"Connecting to {len(launch.remote)} machine(s)", 0.05)
    launch.clients = connect_targets(launch.remote, launch.connector, "Could not connect")


def _check(launch: Launch) -> None:
    """Every target as its driver checks it, all at once; the reasons reported together."""
    from dtgui.launch.checks.precheck import check_versions_agree, expected_tf_version
    from dtgui.remote.parallel import each

    targets = checked(launch)
    launch.progress(f"Checking {', '.join(t.label for t in targets)}", 0.15)
    launch.expected_tf = expected_tf_version()
    script = launch.script
    problems = [script.refusal] if script is not None and script.refusal else []
    found = each(lambda t: driver_for(t).check(launch, t), targets, name="dtgui-check")
    for target, result in zip(targets, found, strict=True):
        if isinstance(result, Exception):
            problems.append(f"{target.label}: the check failed ({result}).")
        else:
            problems += result
    if launch.expected_tf is None and not problems:
        problems += check_versions_agree(list(launch.checks.values()))
    if problems:
        raise LaunchError("Not launched: " + " ".join(problems))


def _place(launch: Launch) -> None:
    alone = [driver_for(t).whole_run for t in launch.targets if driver_for(t).whole_run]
    if alone and len(launch.targets) > 1:
        raise LaunchError(f"Not launched: {alone[0]}")
    try:
        launch.placed = driver_for(launch.targets[0]).place(launch)
    except Refused as exc:
        raise LaunchError(f"Not launched: {exc}") from exc


def _render(launch: Launch) -> None:
    try:
        launch.bundle = render_bundle(launch.placed, launch.bundle_dir)
    except PlanError as exc:
        raise LaunchError(f"Not launched: {exc}") from exc
    for target in launch.targets:
        driver_for(target).render(launch, target, launch.bundle)


def _check_model(launch: Launch) -> None:
    assert launch.bundle is not None
    launch.progress("Checking the model file in the bundle", 0.25)
    problem = check_bundled_model(launch.bundle, local_python(launch))
    if problem:
        shutil.rmtree(launch.bundle.path, ignore_errors=True)
        raise LaunchError(f"Not launched: {problem}")


def record_targets(launch: Launch, bundle: Bundle) -> None:
    """Each target's machine in the run record and its executor (a launch's or a resume's)."""
    for target in launch.targets:
        driver = driver_for(target)
        run_dir = launch.run_dir(target)
        address = launch.placed.machine(target.name).address
        launch.record.machines.append(driver.record(target, run_dir, address))
        launch.executors.append(driver.executor(
            target, bundle, run_dir, connector=launch.connector if target.needs_connection
            else None, client=launch.clients.get(target.name), dir_ready=True))


def _record(launch: Launch) -> None:
    bundle = launch.bundle
    assert bundle is not None
    record = launch.record
    record.run_name, record.strategy = launch.placed.run_name, launch.placed.strategy
    record_targets(launch, bundle)
    write_manifest(bundle.path)  # a resume refuses a bundle edited since
    record.begin_segment()
    record.launcher = this_process()
    record.save()  # a folder outside the runs folder is listed there too (`remember_run`)
    launch.recorded = True


def _upload(launch: Launch) -> None:
    from dtgui.remote.parallel import each

    assert launch.bundle is not None
    remote = [(t, ex) for t, ex in zip(launch.targets, launch.executors, strict=True)
              if t.needs_connection]
    archive = bundle_archive(launch.bundle)
    done: dict[str, int] = {}
    shown = [0.0]

    def report(machine: str, sent: int) -> None:
        done[machine] = sent
        fraction = sum(done.values()) / (len(remote) * len(archive) or 1)
        if fraction - shown[0] >= 0.05 or fraction >= 1:  # at most ~20 updates
            shown[0] = fraction
            launch.progress(f"Copying the bundle ({len(archive) // 1024} KiB) to "
                            f"{len(remote)} machine(s)", 0.3 + 0.55 * fraction)

    def copy(pair: tuple[Target, Executor]) -> None:
        target, executor = pair
        driver_for(target).upload(executor, archive,
                                  lambda sent, _total: report(executor.name, sent))

    errors = [f"{ex.name}: {r}" for (_, ex), r in zip(remote, each(copy, remote,
                                                                   name="dtgui-upload"),
                                                      strict=True) if isinstance(r, Exception)]
    if errors:
        raise LaunchError("Copying the bundle failed: " + " ".join(errors))


def _start(launch: Launch) -> None:
    assert launch.bundle is not None
    placed = launch.placed
    controller = RunController(launch.bundle, executors=launch.executors, record=launch.record,
                               policy=launch.policy)
    if launch.script is not None and (launch.script.notes or launch.script.warnings):
        controller.metrics.add_log_lines(
            placed.tasks[0].task_id, [f"[dtgui] warning: {w}" for w in launch.script.warnings]
            + [f"[dtgui] {n}" for n in launch.script.notes])
    if launch.notes:
        controller.metrics.add_log_lines(placed.tasks[0].task_id,
                                         [f"[dtgui] {n}" for n in launch.notes])
    launch.progress(f"Starting {len(placed.tasks)} task(s)", 0.9)
    # ports the check chose free or bind-tested on every machine are not tested again
    tested = len(checked(launch)) == len(launch.targets)
    controller.start(check_ports=not tested)
    launch.controller = controller


@dataclass(frozen=True)
class Step:
    """One step of a launch: `run` when it `applies` to the launch."""

    name: str
    run: Callable[[Launch], None]
    applies: Callable[[Launch], bool] = lambda _launch: True


STEPS: tuple[Step, ...] = (
    Step("connect", _connect, lambda launch: bool(launch.remote)),
    Step("check", _check, lambda launch: bool(checked(launch))),
    Step("place", _place),
    Step("render", _render),
    Step("check model", _check_model, lambda launch: launch.plan.model_file is not None),
    Step("record", _record),
    Step("upload", _upload, lambda launch: bool(launch.remote)),
    Step("start", _start),
)
# a bundle rendered already: placed, rendered and its model checked when it was written
BUNDLE_STEPS: tuple[Step, ...] = tuple(
    s for s in STEPS if s.name not in ("place", "render", "check model"))


def _run_steps(launch: Launch, steps: Sequence[Step], cleanup: bool = True) -> RunController:
    """The steps that apply, in order; a failure marks the record failed (once written) and
    removes what the drivers made for a launch that did not start (`cleanup`: a resume's
    targets hold the run's files, which stay)."""
    try:
        started = time.monotonic()
        for step in steps:
            if step.applies(launch):
                step.run(launch)
                now = time.monotonic()
                launch.timings[step.name], started = now - started, now
    except BaseException as exc:
        if launch.recorded and launch.controller is None:
            launch.record.end(RunState.FAILED, str(exc), None)
            launch.record.save()
        if launch.controller is None and cleanup:
            for target in launch.targets:
                with contextlib.suppress(Exception):  # the launch's own error is reported
                    driver_for(target).cleanup(launch, target)
        launch.close()
        raise
    controller = launch.controller
    assert isinstance(controller, RunController)
    controller.launch_timings = launch.timings
    launch.progress("Running", 1.0)
    return controller


def _known(targets: Sequence[Target]) -> list[Target]:
    """The targets, each of a kind a driver is registered for (else LaunchError)."""
    try:
        for target in targets:
            driver_for(target)
    except Refused as exc:
        raise LaunchError(f"Not launched: {exc}") from exc
    return list(targets)


def _new_launch(plan: Plan, bundle_dir: Path, targets: Sequence[Target],
                assignments: Mapping[str, str], connect: Connector | None,
                policy: RunPolicy | None, progress: LaunchProgress | None, keep_ports: bool,
                project: Path | None = None) -> Launch:
    """`project`: where a script plan's code is (default: the plan's project folder)."""
    try:
        return Launch(plan, bundle_dir, targets, assignments, connect, policy, progress,
                      keep_ports, study(plan, project))
    except UnknownMachine as exc:
        raise LaunchError(str(exc)) from exc


def launch_plan(plan: Plan, runs_root: Path | None = None, *,
                targets: Sequence[Target] = (), assignments: Mapping[str, str] | None = None,
                connect: Connector | None = None, policy: RunPolicy | None = None,
                progress: LaunchProgress | None = None,
                keep_ports: bool | None = None) -> RunController:
    """Start `plan` on its targets and return the controller that watches it.

    `targets`: the machines the plan may use (`plan_targets` gives those of a placed plan;
    default: this machine alone). `assignments`: task id -> machine name ("local" = this
    machine; default: the plan's own placement, or every task here when it has none; every
    task on a target whose kind takes a whole run). `connect`: connects to remote targets
    (default: the keyring's secrets). `keep_ports`: use the ports already in `plan.tasks`
    (bind-tested first) instead of choosing free ones; by default kept for a plan placed on
    this machine alone (they were chosen free here).
    """
    targets = _known(targets) or [local_target()]
    whole = [t for t in targets if driver_for(t).whole_run]
    if assignments is None and whole:  # one batch job: every task is on its scheduler's nodes
        assignments = {f"{kind}:{index}": whole[0].name for kind, index in task_layout(plan)}
    if assignments is None:  # the plan's own placement, or every task on this machine
        assignments = {t.task_id: t.machine_name for t in plan.tasks} if plan.tasks \
            else {f"{kind}:{index}": LOCAL_MACHINE for kind, index in task_layout(plan)}
    if keep_ports is None:
        keep_ports = bool(plan.tasks) and all(t.is_local for t in plan.tasks)
    launch = _new_launch(plan, unique_run_dir(runs_root or runs_dir(), plan.run_name), targets,
                         assignments, connect, policy, progress, keep_ports and bool(plan.tasks))
    return _run_steps(launch, STEPS)


def launch_bundle(bundle: Bundle, targets: Sequence[Target] = (), *,
                  connect: Connector | None = None, policy: RunPolicy | None = None,
                  progress: LaunchProgress | None = None) -> RunController:
    """Start a bundle rendered already (`dtgui export`), in its own directory, and return
    the controller that watches it: connect, check, record (in the bundle), upload, start.

    `targets`: the machines its tasks are placed on (default: those the drivers find for
    the bundle: the scheduler a job's bundle was written for, else this machine)."""
    plan = bundle.plan
    try:
        targets = _known(targets) or bundle_targets(bundle)
    except Refused as exc:
        raise LaunchError(str(exc)) from exc
    names = {t.name for t in targets}
    if any(t.machine_name not in names for t in plan.tasks):
        raise LaunchError("This bundle's tasks run on other machines: start it from the app, "
                          "or run `bash run.sh MACHINE` on each machine (see its README).")
    launch = _new_launch(plan, bundle.path, targets,
                         {t.task_id: t.machine_name for t in plan.tasks}, connect, policy,
                         progress, keep_ports=True,
                         project=bundle.path / BUNDLE_PROJECT_DIR)  # its imports checked too
    if launch.script is not None:
        launch.script.refusal = ""  # the export decided that (`dtgui export --no-check`)
    launch.bundle = bundle
    return _run_steps(launch, BUNDLE_STEPS)


def reattach(record: RunRecord, *, connect: Connector | None = None,
             registry: MachineRegistry | None = None,
             policy: RunPolicy | None = None) -> RunController:
    """Follow a recorded run again: every machine is connected first (an error is raised and
    nothing changes when one cannot be), then its tasks are watched from their pids and every
    event is read again from the start. A run none of whose tasks is left is recorded as lost
    (`dtgui.launch.start.run_check`) and not followed: LaunchError says so."""
    from dtgui.launch.start.run_check import settle

    connector = connect or default_connector()
    if record.is_active:
        settle(record, connector=connector, registry=registry)
    if record.state is RunState.LOST:
        raise LaunchError(f"Cannot reattach: {record.run_name} is {record.state}: "
                          f"{record.message}")
    bundle = Bundle.open(Path(record.bundle))
    try:
        targets = [target_of_record(rec, registry) for rec in record.machines]
    except Refused as exc:
        raise LaunchError(f"Cannot reattach: {exc}") from exc
    clients = connect_targets(targets, connector, "Cannot reattach")
    pids = record.pids()
    jobs = record.job_ids()
    executors: list[Executor] = []
    for target, rec in zip(targets, record.machines, strict=True):
        executor = driver_for(target).executor(
            target, bundle, rec.dir, client=clients.get(target.name),
            connector=connector if target.needs_connection else None)
        if rec.job_id:  # a scheduler's tasks: its executor adopts them by their job's id
            executor.job_id = rec.job_id
            executor.adopt({t: int(j) for t, j in jobs.items() if j == rec.job_id and j.isdigit()})
        else:
            executor.adopt(pids)
        executors.append(executor)
    policy = policy or RunPolicy(max_restarts=record.max_restarts)
    controller = RunController(bundle, executors=executors, record=record, policy=policy)
    controller.restarts = record.restarts
    controller.attach()
    return controller
