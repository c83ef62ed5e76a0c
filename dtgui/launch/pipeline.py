"""The one launch pipeline, for every kind of target, and the reattach.

`launch_plan(plan, ...)` runs the named steps of `STEPS`, in order. Each step acts on every
target it applies to, in parallel over the machines (`dtgui.remote.parallel`), and is skipped
where it applies to none: a run on this machine alone connects to nothing, checks nothing but
a user's own script, and copies nothing.

    connect      every target reached over SSH (host keys verified)
    check        Python and TensorFlow, the run directory, free ports (or the plan's ports
                 bind-tested), a user's script's imports: one round trip a machine
                 (`dtgui.launch.precheck`); this machine alone is checked only for a script;
                 a Slurm job against the cluster's partitions (`sinfo`)
    place        the tasks on their machines with those ports (`dtgui.core.cluster.place_plan`);
                 on a Slurm cluster, in rank order (their ports are chosen on the nodes)
    render       the bundle under the runs directory (with its batch script for Slurm)
    check model  a model file imported from the bundle in a TensorFlow subprocess
    record       the run record (the history lists the run from now on) and one executor a
                 target (`dtgui.launch.targets.make_executor`)
    upload       the bundle copied to every remote target
    start        every task (a Slurm cluster: `sbatch`), then the run policy watches
                 (`RunController`)

Nothing is started unless every machine passed every check, and the reasons are reported
together; a failure once the record is written marks it failed. `reattach(record)` follows a
recorded run again, with the same connect step and the same executor factory.

Everything here blocks (for seconds when other machines take part): call it off the UI thread.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dtgui.core.bundle import Bundle, render_bundle
from dtgui.core.cluster import PlacementError, machine_key, place_plan, task_layout
from dtgui.core.machines import MachineRegistry
from dtgui.core.plan import LOCAL_MACHINE, Plan, PlanError
from dtgui.core.run_state import RunState
from dtgui.core.runs import RunRecord
from dtgui.core.settings import runs_dir
from dtgui.launch.controller import LaunchError, RunController
from dtgui.launch.executor import Executor
from dtgui.launch.model_check import check_bundled_model
from dtgui.launch.policy import RunPolicy
from dtgui.launch.script_check import ScriptStudy, machine_problems, study
from dtgui.launch.targets import (
    Target,
    TargetKind,
    command_runner,
    machine_record,
    make_executor,
)
from dtgui.worker.machine_probe import choose_free_ports

if TYPE_CHECKING:  # paramiko is imported only when a step needs it (not for this machine)
    from dtgui.launch.precheck import PythonCheck
    from dtgui.remote.connection import SSHClient
    from dtgui.remote.connector import Connector

__all__ = ["STEPS", "LaunchError", "LaunchProgress", "Step", "Target", "launch_plan",
           "reattach"]

LaunchProgress = Callable[[str, float], None]  # (what is happening, fraction done 0..1)


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


def _default_connector() -> Connector:
    from dtgui.remote.connector import Connector

    return Connector()


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


def _local_address(client: SSHClient) -> str:
    """The address this machine used to reach a remote one (which can reach it back)."""
    transport = client.get_transport()
    sock = getattr(transport, "sock", None)
    if isinstance(sock, socket.socket):
        return str(sock.getsockname()[0])
    return ""


class Launch:
    """One launch in progress: its targets, and what each step found or made."""

    def __init__(self, plan: Plan, runs_root: Path, targets: Sequence[Target],
                 assignments: Mapping[str, str], connector: Connector | None,
                 policy: RunPolicy | None, progress: LaunchProgress | None,
                 keep_ports: bool) -> None:
        self.plan = plan
        self.assignments = {t: machine_key(m) for t, m in assignments.items()}
        used = list(dict.fromkeys(self.assignments.values()))
        by_name = {machine_key(t.name): t for t in targets}
        unknown = [m for m in used if m not in by_name]
        if unknown:
            raise LaunchError(f"No machine named {', '.join(unknown)} was chosen.")
        self.targets = [by_name[m] for m in used]
        self._connector = connector
        self.policy = policy
        self.progress = progress or (lambda _text, _fraction: None)
        self.keep_ports = keep_ports
        self.bundle_dir = unique_run_dir(runs_root, plan.run_name)
        self.record = new_record(self.bundle_dir, plan)  # its id names the remote directories
        self.script: ScriptStudy | None = study(plan)  # a user's own script, looked at
        self.clients: dict[str, SSHClient] = {}
        self.checks: dict[str, PythonCheck] = {}
        self.cluster_dir = ""  # a Slurm run's directory on the cluster's shared filesystem
        self.notes: list[str] = []  # what a check could not tell, shown in the run's log
        self.placed = plan
        self.bundle: Bundle | None = None
        self.executors: list[Executor] = []
        self.recorded = False
        self.controller: RunController | None = None
        self.timings: dict[str, float] = {}

    # -- facts the steps share -------------------------------------------------------------
    @property
    def connector(self) -> Connector:
        if self._connector is None:
            self._connector = _default_connector()
        return self._connector

    @property
    def remote(self) -> list[Target]:
        return [t for t in self.targets if t.needs_connection]

    @property
    def slurm(self) -> Target | None:
        """The Slurm cluster the run is one job on (then the only target), or None."""
        return next((t for t in self.targets if t.kind is TargetKind.SLURM), None)

    @property
    def checked(self) -> list[Target]:
        """The targets the check step runs on: every remote one; this machine when other
        machines take part (versions must agree, ports be found) or a script is looked at.
        A Slurm job's nodes are not the login node: Slurm itself refuses what cannot run."""
        if self.slurm is not None:
            return []
        return [t for t in self.targets if not t.is_local or len(self.targets) > 1
                or self.script is not None]

    @property
    def local_python(self) -> str:
        """This machine's interpreter for the run (the model check runs it here)."""
        return next((t.interpreter for t in self.targets if t.is_local), sys.executable)

    def task_count(self, target: Target) -> int:
        return sum(1 for m in self.assignments.values() if m == target.name)

    def wanted_ports(self, target: Target) -> list[int]:
        """The ports the plan gives this target's tasks (keep_ports), in task order."""
        if not self.keep_ports:
            return []
        return [t.port for t in self.plan.tasks
                if self.assignments.get(t.task_id) == target.name and t.port]

    def relative_dir(self, target: Target) -> str:
        """The run directory under the machine's home (the check makes it)."""
        from dtgui.launch.ssh_exec import remote_run_dir

        return remote_run_dir("", self.record.run_id, target.name).lstrip("/")

    def run_dir(self, target: Target) -> str:
        """The bundle directory on the target."""
        assert self.bundle is not None
        if not target.needs_connection:
            return str(self.bundle.path)
        if target.kind is TargetKind.SLURM:
            return self.cluster_dir  # on the shared filesystem (the check made it)
        return self.checks[target.name].directory

    def addresses(self) -> dict[str, str]:
        """Given addresses; this machine's is the end of its SSH connections."""
        out = {}
        for target in self.targets:
            if target.address:
                out[target.name] = target.address
            elif target.is_local:
                found = [_local_address(c) for c in self.clients.values()]
                out[target.name] = next((a for a in found if a), "")
            elif target.machine is not None:
                out[target.name] = target.machine.host
        return out

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


# -- the steps ------------------------------------------------------------------------------
def _connect(launch: Launch) -> None:
    launch.progress(f"Connecting to {len(launch.remote)} machine(s)", 0.05)
    launch.clients = connect_targets(launch.remote, launch.connector, "Could not connect")


def _check(launch: Launch) -> None:
    """Python, TensorFlow, the run directory and the ports: one round trip a machine."""
    if launch.slurm is not None:
        _check_cluster(launch, launch.slurm)
        return
    from dtgui.launch.precheck import check_python, check_versions_agree, expected_tf_version
    from dtgui.remote.parallel import each

    launch.progress("Checking Python, TensorFlow and ports on every machine", 0.15)
    expected = expected_tf_version()
    script = launch.script
    modules = script.modules if script is not None else ()
    data_dir = script.script.data_dir if script is not None else ""

    def one(target: Target) -> PythonCheck:
        wanted = launch.wanted_ports(target)
        return check_python(target.label, target.interpreter,
                            command_runner(target, launch.clients.get(target.name)), expected,
                            import_tf=not target.is_local,
                            directory="" if target.is_local else launch.relative_dir(target),
                            port_count=0 if launch.keep_ports else launch.task_count(target),
                            ports=tuple(wanted), modules=modules, data_dir=data_dir)

    targets = launch.checked
    problems = [script.refusal] if script is not None and script.refusal else []
    for target, result in zip(targets, each(one, targets, name="dtgui-check"), strict=True):
        if isinstance(result, Exception):
            problems.append(f"{target.label}: the check failed ({result}).")
            continue
        launch.checks[target.name] = result
        problems += result.problems
        if script is not None and result.executable:
            problems += machine_problems(script, result)
        problems += [f"Port {t.port} on {target.label} (task {t.task_id}) is in use by "
                     "another process: choose other ports (or stop that process)."
                     for t in launch.plan.tasks if launch.keep_ports and t.port
                     and launch.assignments.get(t.task_id) == target.name
                     and t.port in result.busy_ports]
    if expected is None and not problems:
        problems += check_versions_agree(list(launch.checks.values()))
    if problems:
        raise LaunchError("Not launched: " + " ".join(problems))


def _check_cluster(launch: Launch, target: Target) -> None:
    """The job against the cluster's partitions (`sinfo` on the login node)."""
    from dtgui.core.slurm import SlurmError
    from dtgui.remote.slurm import check_job, probe

    assert target.slurm is not None
    launch.progress(f"Asking Slurm about {target.label}", 0.15)
    runner = command_runner(target, launch.clients.get(target.name))
    try:
        facts = probe(runner)
    except SlurmError as exc:
        raise LaunchError(f"Not launched: {exc}") from exc
    if facts.version:
        found = check_job(runner, target.slurm, facts)
        problems, launch.notes = found.problems, found.notes
    else:
        problems = facts.problems[:1]
    if problems:
        raise LaunchError("Not launched: " + " ".join(problems))
    if target.machine is not None:  # the run's directory on the shared filesystem
        from dtgui.remote.slurm import make_run_dir

        shared = target.machine.slurm.shared_dir if target.machine.slurm else "dtgui-runs"
        try:
            launch.cluster_dir = make_run_dir(runner, shared, launch.record.run_id)
        except SlurmError as exc:
            raise LaunchError(f"Not launched: {target.label}: {exc}") from exc


def _remove_cluster_dir(launch: Launch) -> None:
    """A launch that did not start leaves nothing on the cluster's shared filesystem."""
    from dtgui.remote.slurm import remove_run_dir

    target = launch.slurm
    if target is not None:
        with contextlib.suppress(Exception):  # the launch's own error is the one reported
            remove_run_dir(command_runner(target, launch.clients.get(target.name)),
                           launch.cluster_dir)


def _place(launch: Launch) -> None:
    if launch.slurm is not None:
        _place_on_cluster(launch, launch.slurm)
        return
    ports: dict[str, list[int]] = {}
    for target in launch.targets:
        if launch.keep_ports:
            ports[target.name] = launch.wanted_ports(target)
        elif target.name in launch.checks:
            ports[target.name] = launch.checks[target.name].free_ports
        else:  # this machine, unchecked: free here now (the start step tests them again)
            ports[target.name] = choose_free_ports(launch.task_count(target))
    machines = {t.name: t.machine for t in launch.targets if t.machine is not None}
    known = list(machines.values())
    if any(m.jump_host.strip() for m in known):  # a jump host may be any registered machine
        known += MachineRegistry().machines()
    try:
        launch.placed = place_plan(launch.plan, launch.assignments, machines, ports,
                                   pythons={t.name: t.interpreter for t in launch.targets},
                                   gpus={t.name: t.gpus for t in launch.targets if t.gpus},
                                   known=known, addresses=launch.addresses())
    except PlacementError as exc:
        raise LaunchError(f"Not launched: {exc}") from exc


def _place_on_cluster(launch: Launch, target: Target) -> None:
    from dtgui.core.slurm import job_problems
    from dtgui.core.slurm_bundle import place_on_cluster

    assert target.slurm is not None
    if len(launch.targets) > 1:
        raise LaunchError("Not launched: a run on a Slurm cluster runs all its tasks there; "
                          "it cannot take other machines too.")
    launch.placed = place_on_cluster(launch.plan, target.slurm)
    problems = job_problems(launch.placed, target.slurm)
    if problems:
        raise LaunchError("Not launched: " + " ".join(problems))


def _render(launch: Launch) -> None:
    try:
        launch.bundle = render_bundle(launch.placed, launch.bundle_dir)
    except PlanError as exc:
        raise LaunchError(f"Not launched: {exc}") from exc
    if launch.slurm is not None and launch.slurm.slurm is not None:
        from dtgui.core.slurm_bundle import write_slurm_files

        write_slurm_files(launch.bundle, launch.slurm.slurm)


def _check_model(launch: Launch) -> None:
    assert launch.bundle is not None
    launch.progress("Checking the model file in the bundle", 0.25)
    problem = check_bundled_model(launch.bundle, launch.local_python)
    if problem:
        shutil.rmtree(launch.bundle.path, ignore_errors=True)
        raise LaunchError(f"Not launched: {problem}")


def _record(launch: Launch) -> None:
    bundle = launch.bundle
    assert bundle is not None
    record = launch.record
    record.run_name, record.strategy = launch.placed.run_name, launch.placed.strategy
    for target in launch.targets:
        run_dir = launch.run_dir(target)
        address = launch.placed.machine(target.name).address
        record.machines.append(machine_record(target, run_dir, address))
        launch.executors.append(make_executor(
            target, bundle, run_dir, connector=launch.connector if target.needs_connection
            else None, client=launch.clients.get(target.name), dir_ready=True))
    record.save()
    launch.recorded = True


def _upload(launch: Launch) -> None:
    from dtgui.launch.slurm_remote import RemoteSlurmExecutor
    from dtgui.launch.ssh_exec import SshExecutor, bundle_archive
    from dtgui.remote.parallel import each

    assert launch.bundle is not None
    remote = [ex for ex in launch.executors
              if isinstance(ex, SshExecutor | RemoteSlurmExecutor)]
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

    def copy(executor: SshExecutor | RemoteSlurmExecutor) -> None:
        executor.archive = archive
        executor.prepare(lambda sent, _total: report(executor.name, sent))

    errors = [f"{ex.name}: {r}" for ex, r in zip(remote, each(copy, remote, name="dtgui-upload"),
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
    tested = len(launch.checked) == len(launch.targets)
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
    Step("check", _check, lambda launch: bool(launch.checked) or launch.slurm is not None),
    Step("place", _place),
    Step("render", _render),
    Step("check model", _check_model, lambda launch: launch.plan.model_file is not None),
    Step("record", _record),
    Step("upload", _upload, lambda launch: bool(launch.remote)),
    Step("start", _start),
)


def launch_plan(plan: Plan, runs_root: Path | None = None, *,
                targets: Sequence[Target] = (), assignments: Mapping[str, str] | None = None,
                connect: Connector | None = None, policy: RunPolicy | None = None,
                progress: LaunchProgress | None = None,
                keep_ports: bool | None = None) -> RunController:
    """Start `plan` on its targets and return the controller that watches it.

    `targets`: the machines the plan may use (`plan_targets` gives those of a placed plan;
    default: this machine alone). `assignments`: task id -> machine name ("local" = this
    machine; default: the plan's own placement, or every task here when it has none).
    `connect`: connects to remote targets (default: the keyring's secrets). `keep_ports`:
    use the ports already in `plan.tasks` (bind-tested first) instead of choosing free ones;
    by default kept for a plan placed on this machine alone (they were chosen free here).
    """
    clusters = [t for t in targets if t.kind is TargetKind.SLURM]
    if assignments is None and clusters:  # a Slurm job: every task is on the cluster
        assignments = {f"{kind}:{index}": clusters[0].name for kind, index in task_layout(plan)}
    if assignments is None:  # the plan's own placement, or every task on this machine
        assignments = {t.task_id: t.machine_name for t in plan.tasks} if plan.tasks \
            else {f"{kind}:{index}": LOCAL_MACHINE for kind, index in task_layout(plan)}
    if keep_ports is None:
        keep_ports = bool(plan.tasks) and all(t.is_local for t in plan.tasks)
    launch = Launch(plan, runs_root or runs_dir(), list(targets) or [Target()], assignments,
                    connect, policy, progress, keep_ports and bool(plan.tasks))
    try:
        started = time.monotonic()
        for step in STEPS:
            if step.applies(launch):
                step.run(launch)
                now = time.monotonic()
                launch.timings[step.name], started = now - started, now
    except BaseException as exc:
        if launch.recorded and launch.controller is None:
            launch.record.end(RunState.FAILED, str(exc), None)
            launch.record.save()
        if launch.cluster_dir and launch.controller is None:
            _remove_cluster_dir(launch)
        launch.close()
        raise
    controller = launch.controller
    assert controller is not None
    controller.launch_timings = launch.timings
    launch.progress("Running", 1.0)
    return controller


def reattach(record: RunRecord, *, connect: Connector | None = None,
             registry: MachineRegistry | None = None,
             policy: RunPolicy | None = None) -> RunController:
    """Follow a recorded run again: every machine is connected first (an error is raised and
    nothing changes when one cannot be), then its tasks are watched from their pids and every
    event is read again from the start."""
    connector = connect or _default_connector()
    bundle = Bundle.open(Path(record.bundle))
    targets = [Target.of_record(rec, registry) for rec in record.machines]
    clients = connect_targets(targets, connector, "Cannot reattach")
    pids = record.pids()
    executors: list[Executor] = []
    for target, rec in zip(targets, record.machines, strict=True):
        executor = make_executor(target, bundle, rec.dir, client=clients.get(target.name),
                                 connector=connector if target.needs_connection else None)
        executor.adopt(pids)
        executors.append(executor)
    policy = policy or RunPolicy(max_restarts=record.max_restarts)
    controller = RunController(bundle, executors=executors, record=record, policy=policy)
    controller.restarts = record.restarts
    controller.attach()
    return controller
