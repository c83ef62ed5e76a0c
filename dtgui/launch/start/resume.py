"""Resume an ended run from its newest checkpoint, in the same run: through the launch
pipeline's steps (`dtgui.launch.start.pipeline`) and the targets' drivers, never a second launch
path. The command line (`dtgui resume`), the dashboard and the Runs page (through
`RunSession.resume`) all call `resume_run`.

    connect      every machine the run resumes on reached over SSH (host keys verified)
    checkpoint   the chief's newest checkpoint copied from where it was trained (its machine,
                 the cluster's shared filesystem) into the local bundle's output and checked
                 there, without TensorFlow (`dtgui.core.bundles.checkpoint_files`)
    check        each target as its driver checks it (Python, TensorFlow, ports, ...)
    place        on other machines only: the tasks placed there (the drivers' placement)
    record       the bundle's placement files written again when they changed (other
                 machines, other steps), the record's new segment, the executors
    upload       the bundle copied to every target reached over SSH (over the run's directory
                 there: its output stays)
    checkpoints  the checkpoint copied to every machine that lacks it, and the events and
                 logs of a task that moved to its new machine
    start        every task, reading on where the run's events and logs end: the curves
                 continue from the checkpoint's step (the tasks' `started` event rewinds them
                 to it), in the same run, its history and its record

Nothing is changed before the record step: a refusal (the run is still running, its bundle
was edited, its checkpoint is missing or damaged, a machine is gone, the strategy or the
replica count changed in a way its checkpoint does not restore across) leaves the run as it
was. Everything here blocks: call it off the UI thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dtgui.core.bundles.bundle import Bundle, BundleError, primary_tasks, rewrite_placement
from dtgui.core.bundles.bundle_manifest import edited_files, write_manifest
from dtgui.core.bundles.checkpoint_files import CHECKPOINTS_DIR, newest_checkpoint
from dtgui.core.events import read_all
from dtgui.core.machines.registry import MachineRegistry
from dtgui.core.plans.plan import Plan, PlanError
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.records import RunRecord
from dtgui.core.runs.run_state import RunState
from dtgui.launch.controller import LaunchError, RunController
from dtgui.launch.drivers import Refused, driver_for, target_of_record
from dtgui.launch.exec.executor import Executor
from dtgui.launch.exec.host import this_process
from dtgui.launch.launch_state import Launch, LaunchProgress, UnknownMachine
from dtgui.launch.runs.policy import RunPolicy
from dtgui.launch.start.pipeline import (
    STEPS,
    Step,
    _run_steps,
    checked,
    connect_targets,
    record_targets,
)
from dtgui.launch.targets import Target

if TYPE_CHECKING:
    from dtgui.remote.connector import Connector

__all__ = ["RESUME_STEPS", "RESUMING_LINE", "ResumeLaunch", "restore_refusal", "resume_refusal", "resume_run"]

# strategies whose checkpoints hold one copy of every variable, the same whatever the
# strategy and the replica count: a checkpoint of one restores under any other of them
_ONE_COPY = frozenset({Strategy.ONE_DEVICE, Strategy.MIRRORED, Strategy.CENTRAL_STORAGE,
                       Strategy.MULTI_WORKER_MIRRORED})
CHANGEABLE = ("strategy", "workers", "replicas_per_task")
RESUMING_LINE = "[dtgui] resuming"  # the chief's log line saying where a resume goes on  # with `steps`, what a resume changes


def restore_refusal(old: Plan, new: Plan) -> str:
    """Why a checkpoint of `old` cannot be resumed as `new` ("" = it can): a Keras model's
    tf.train.Checkpoint holds one copy of each variable under OneDevice, Mirrored,
    CentralStorage and MultiWorkerMirrored, so it restores across them and across replica
    counts; ParameterServer and TPU lay their variables out their own way."""
    if old.strategy == new.strategy and old.total_replicas == new.total_replicas and \
            old.workers == new.workers:
        return ""
    if old.script is not None:
        return ("a script's own checkpoints are its own: its strategy and replica count "
                "cannot change at a resume (start a new run instead)")
    if old.strategy in _ONE_COPY and new.strategy in _ONE_COPY:
        return ""
    changed = (f"the strategy {old.strategy.title} -> {new.strategy.title}"
               if old.strategy != new.strategy else
               f"the replica count {old.total_replicas} -> {new.total_replicas}")
    return (f"{changed} cannot be resumed: a {old.strategy.title} checkpoint restores only "
            f"under {old.strategy.title} with the same tasks (OneDevice, Mirrored, "
            "CentralStorage and MultiWorkerMirrored checkpoints restore across each other and "
            "across replica counts); start a new run instead")


def _gpus_kept(old: Plan, targets: Sequence[Target], assignments: Mapping[str, str]) -> bool:
    """Every task given GPUs keeps them on a target given GPUs of its own (a sweep's GPU
    slot): else it is placed again, on the target's GPUs."""
    given = {t.name: set(t.gpus) for t in targets if t.gpus}
    return all(set(task.gpus) <= given[name] for task in old.tasks
               if task.gpus and (name := assignments.get(task.task_id, "")) in given)


def resume_refusal(record: RunRecord, unknown: str = "") -> str:
    """Why the run cannot be resumed at all, before anything is asked ("" = it may be).
    `unknown`: why whether its record's tasks still run could not be told."""
    if record.is_active and unknown:
        return (f"{record.run_name} is recorded as {record.state} and whether it still runs "
                f"is unknown ({unknown}): bring its machines back, or reattach to it from "
                "the Runs page")
    if record.is_active:
        return (f"{record.run_name} is still {record.state}: stop it first (or reattach to "
                "it from the Runs page)")
    if not record.machines:
        return f"{record.run_name} never started (its record names no machine)"
    return ""


class ResumeLaunch(Launch):
    """A launch that resumes a recorded run: its record, bundle and where its checkpoint was
    trained (`source`: the chief's target as recorded)."""

    def __init__(self, record: RunRecord, bundle: Bundle, plan: Plan,
                 targets: Sequence[Target], assignments: Mapping[str, str],
                 source: Target, same_place: bool, connector: Connector | None,
                 policy: RunPolicy | None, progress: LaunchProgress | None) -> None:
        super().__init__(plan, bundle.path, targets, assignments, connector, policy, progress,
                         keep_ports=same_place, script=None)
        self.record = record  # the run's own: its id names its directories on the targets
        self.bundle = bundle
        self.source = source
        self.old_plan = bundle.plan  # where its tasks ran
        self.source_dir = next(m.dir for m in record.machines if m.name == source.name)
        self.same_place = same_place
        self.from_step = 0
        self.skipped = ""  # newer checkpoints that are not whole, and why (in words)


# -- the resume's own steps -----------------------------------------------------------------
def _connect_resumed(launch: Launch) -> None:
    launch.progress(f"Connecting to {len(launch.remote)} machine(s)", 0.05)
    launch.clients = connect_targets(
        launch.remote, launch.connector, "Not resumed: a machine of the run cannot be reached "
        "(bring it back, or resume on other machines; nothing was changed)")


def _fetch_checkpoint(launch: Launch) -> None:
    assert isinstance(launch, ResumeLaunch) and launch.bundle is not None
    source, bundle = launch.source, launch.bundle
    launch.progress(f"Reading the checkpoint on {source.label}", 0.1)
    client = launch.clients.get(source.name)
    opened = {}
    if source.needs_connection and client is None:
        opened = connect_targets([source], launch.connector,
                                 f"Not resumed: {source.label}, where the run's checkpoints "
                                 "are, cannot be reached; bring it back, then resume "
                                 "(nothing was changed)")
        client = opened.get(source.name)
    executor = driver_for(source).executor(
        source, bundle, launch.source_dir, client=client,
        connector=launch.connector if source.needs_connection else None, dir_ready=True)
    try:
        copied = executor.fetch_output(CHECKPOINTS_DIR)
    except Exception as exc:
        raise LaunchError(f"Not resumed: the checkpoints could not be read on {source.label} "
                          f"({exc}); nothing was changed") from exc
    finally:
        for c in opened.values():
            c.close()
    if executor.mirrors and not copied:  # a copy here from an earlier restart is not its own
        raise LaunchError(f"Not resumed: {source.label} holds no checkpoint of the run in "
                          f"{launch.source_dir}. Start the run anew (or clone it); nothing "
                          "was changed.")
    found = newest_checkpoint(bundle.output / CHECKPOINTS_DIR,
                              own_script=bundle.plan.script is not None)
    if not found.ok:
        keeps = "" if bundle.plan.checkpoint_every or bundle.plan.script else \
            " (the run saved no checkpoints: its plan says checkpoint every 0 steps)"
        raise LaunchError(f"Not resumed: {found.problem}{keeps}. Start the run anew (or "
                          "clone it); nothing was changed.")
    if bundle.plan.script is None and found.step >= launch.plan.steps:
        raise LaunchError(f"Not resumed: its checkpoint is at step {found.step} and the run "
                          f"trains to step {launch.plan.steps}: give it more steps "
                          "(dtgui resume RUN --steps N).")
    launch.from_step, launch.skipped = found.step, found.skipped_text
    if found.skipped:
        launch.progress(f"Resuming from the checkpoint of step {found.step}: "
                        f"{found.skipped_text}", 0.15)


def _record_resume(launch: Launch) -> None:
    """The bundle's placement files when they changed, the new segment, the executors."""
    assert isinstance(launch, ResumeLaunch) and launch.bundle is not None
    if launch.placed != launch.bundle.plan:
        try:
            launch.bundle = rewrite_placement(launch.bundle, launch.placed,
                                              scripts=not launch.same_place)
        except (BundleError, PlanError) as exc:
            raise LaunchError(f"Not resumed: {exc}") from exc
        if not launch.same_place:
            for target in launch.targets:
                driver_for(target).render(launch, target, launch.bundle)
        write_manifest(launch.bundle.path)
    bundle, record = launch.bundle, launch.record
    record.strategy = launch.placed.strategy
    record.machines, record.tasks = [], []
    record_targets(launch, bundle)
    record.state, record.message, record.ended = RunState.STARTING, "", None
    record.begin_segment(launch.from_step)
    record.launcher = this_process()
    record.save()  # a run outside the runs folder from before its register is listed now
    launch.recorded = True


def _put_checkpoints(launch: Launch) -> None:
    """The checkpoint on every machine of the run but the one it was trained on, where it
    is already (the workers of a collective strategy each restore it); the events and logs
    of each task that moved to another machine, so that the files there hold the whole run
    (a reattach reads them again from their start)."""
    from dtgui.remote.parallel import each

    assert isinstance(launch, ResumeLaunch)
    was = {t.task_id: t.machine_name for t in launch.old_plan.tasks}
    moved = {t.task_id for t in launch.placed.tasks if was.get(t.task_id) != t.machine_name}
    wanted = [ex for ex in launch.executors
              if not (launch.same_place and ex.name == launch.source.name)]

    def put(ex: Executor) -> None:
        ex.put_checkpoints()
        ex.put_task_files(t for t in ex.task_ids if t in moved)

    launch.progress(f"Copying the checkpoint to {len(wanted)} machine(s)", 0.87)
    errors = [f"{ex.name}: {r}" for ex, r in zip(
        wanted, each(put, wanted, name="dtgui-checkpoint"), strict=True)
        if isinstance(r, Exception)]
    if errors:
        raise LaunchError("Copying the checkpoint failed: " + " ".join(errors))


def _start_resumed(launch: Launch) -> None:
    """Every task, reading on where the bundle's copies of its files end; what was read
    before is fed to the run's curves first."""
    assert isinstance(launch, ResumeLaunch) and launch.bundle is not None
    bundle = launch.bundle
    controller = RunController(bundle, executors=launch.executors, record=launch.record,
                               policy=launch.policy)
    for task in bundle.plan.tasks:
        controller.metrics.add_events(read_all(bundle.events_file(task)))
        try:
            text = bundle.log_file(task).read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        if text:
            controller.metrics.add_log_lines(task.task_id, text.splitlines())
    for executor in launch.executors:
        executor.read_on_from_bundle()
    controller.restarts = launch.record.restarts
    skipped = f" ({launch.skipped})" if launch.skipped else ""
    controller.metrics.add_log_lines(primary_tasks(bundle.plan)[0].task_id, [
        f"{RESUMING_LINE} from the checkpoint of step {launch.from_step}{skipped}"])
    launch.progress(f"Starting {len(bundle.plan.tasks)} task(s)", 0.9)
    tested = len(checked(launch)) == len(launch.targets)
    controller.start(check_ports=not tested)
    launch.controller = controller


def _pipeline_step(name: str) -> Step:
    return next(s for s in STEPS if s.name == name)


RESUME_STEPS: tuple[Step, ...] = (
    Step("connect", _connect_resumed, _pipeline_step("connect").applies),
    Step("checkpoint", _fetch_checkpoint),
    _pipeline_step("check"),
    Step("place", _pipeline_step("place").run,
         lambda launch: not isinstance(launch, ResumeLaunch) or not launch.same_place),
    Step("record", _record_resume),
    _pipeline_step("upload"),
    Step("checkpoints", _put_checkpoints),
    Step("start", _start_resumed),
)


def resume_run(record: RunRecord, *, steps: int | None = None,
               targets: Sequence[Target] = (), assignments: Mapping[str, str] | None = None,
               changes: Mapping[str, Any] | None = None, connect: Connector | None = None,
               registry: MachineRegistry | None = None, policy: RunPolicy | None = None,
               progress: LaunchProgress | None = None) -> RunController:
    """Resume the ended run of `record` from its newest checkpoint and return the controller
    that watches it (the same run: its folder, record and curves go on).

    `steps`: the step it trains to (default: the plan's). `targets` / `assignments`: other
    machines to resume on and each task's machine (default: its own machines, its tasks where
    they were). `changes`: the plan's `strategy`, `workers` or `replicas_per_task` changed,
    when its checkpoint restores across the change (`restore_refusal`). Raises LaunchError
    with what to do; a refusal changes nothing."""
    from dtgui.launch.start.run_check import Liveness, settle

    check = settle(record, connector=connect, registry=registry)  # a run that was lost ends
    refusal = resume_refusal(record, check.detail if check.verdict is Liveness.UNKNOWN else "")
    if refusal:
        raise LaunchError(f"Not resumed: {refusal}.")
    try:
        bundle = Bundle.open(record.bundle)
    except BundleError as exc:
        raise LaunchError(f"Not resumed: {exc}.") from exc
    edited = edited_files(bundle.path)
    if edited:
        raise LaunchError(
            f"Not resumed: the run's bundle was edited since it started ({', '.join(edited[:5])}"
            f"{', ...' if len(edited) > 5 else ''} in {bundle.path}): its checkpoints belong to "
            "the bundle as it was. Put the files back (bundle.sha256 lists them), or start a "
            "new run with the change; nothing was changed.")
    old = bundle.plan
    plan = old.with_changes(steps=steps) if steps else old
    unknown = sorted(set(changes or {}) - set(CHANGEABLE))
    if unknown:
        raise LaunchError(f"Not resumed: {', '.join(unknown)} cannot change at a resume (only "
                          f"the steps, {', '.join(CHANGEABLE)}).")
    if changes:
        plan = plan.with_changes(**changes, tasks=[])
        refusal = restore_refusal(old, plan)
        if refusal:
            raise LaunchError(f"Not resumed: {refusal}.")
    try:
        recorded = [target_of_record(rec, registry) for rec in record.machines]
    except Refused as exc:
        raise LaunchError(f"Not resumed: {exc}") from exc
    chief = primary_tasks(old)[0].machine_name if old.tasks else recorded[0].name
    source = next((t for t in recorded if t.name == chief), recorded[0])
    if not targets:
        if changes:
            raise LaunchError("Not resumed: a changed strategy or replica count needs the "
                              "machines to resume on.")
        targets, assignments = recorded, {t.task_id: t.machine_name for t in old.tasks}
    targets = list(targets)
    whole = [t for t in targets if driver_for(t).whole_run]
    if assignments is None and whole:
        assignments = {t.task_id: whole[0].name for t in plan.tasks} if plan.tasks else None
    if assignments is None:
        raise LaunchError("Not resumed: say which machine each task resumes on.")
    same_place = not changes and [t.name for t in targets] == [t.name for t in recorded] and \
        dict(assignments) == {t.task_id: t.machine_name for t in old.tasks} and \
        _gpus_kept(old, targets, assignments)
    fixed = [why for t in recorded if (why := driver_for(t).resume_refusal())]
    if fixed and not same_place:
        raise LaunchError(f"Not resumed: {fixed[0]}")
    try:
        launch = ResumeLaunch(record, bundle, plan, targets, assignments, source, same_place,
                              connect, policy or RunPolicy(max_restarts=record.max_restarts),
                              progress)
    except UnknownMachine as exc:
        raise LaunchError(f"Not resumed: {exc}") from exc
    return _run_steps(launch, RESUME_STEPS, cleanup=False)
