"""Launching a plan on several machines, and reattaching to a run.

`launch_on_machines` does, in order, each step in parallel over the machines:
connect (SSH, host keys verified) -> check Python/TensorFlow -> choose free ports (a bind test
on each machine) -> place the tasks (`place_plan`) -> render the bundle here and record
the run -> copy the bundle (SFTP) -> check the ports again -> start every task -> watch.
Nothing is started unless every machine passed every check; the reasons are reported
together. `reattach` follows a recorded run again (after the GUI was closed).

Everything here blocks for seconds: call it off the UI thread.
"""

from __future__ import annotations

import functools
import socket
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dtgui.core.bundle import Bundle, render_bundle
from dtgui.core.cluster import PlacementError, machine_key, place_plan
from dtgui.core.machines import Machine, MachineRegistry
from dtgui.core.plan import LOCAL_MACHINE, Plan, PlanError
from dtgui.core.runs import MachineRecord, RunRecord
from dtgui.core.settings import runs_dir
from dtgui.launch.controller import LaunchError, RunController
from dtgui.launch.executor import Executor
from dtgui.launch.local_exec import LocalExecutor
from dtgui.launch.local_run import new_record, unique_run_dir
from dtgui.launch.model_check import check_bundled_model
from dtgui.launch.policy import RunPolicy
from dtgui.launch.precheck import (
    PythonCheck,
    check_python,
    check_versions_agree,
    expected_tf_version,
    local_runner,
    ssh_runner,
)
from dtgui.launch.script_check import ScriptStudy, machine_problems, study
from dtgui.launch.ssh_exec import SshExecutor, bundle_archive, remote_run_dir

Connector = Callable[[Machine], Any]  # Machine -> a connected paramiko SSHClient
ProgressFn = Callable[[str, float], None]  # (what is happening, fraction done 0..1)


@dataclass
class Target:
    """A machine a plan may use: this one (machine None) or a registered one."""

    name: str = LOCAL_MACHINE
    machine: Machine | None = None
    python: str = ""  # "" = this process's interpreter here, `python3` on a remote machine
    address: str = ""  # the address the other machines reach it at ("" = found out)
    gpus: tuple[int, ...] = ()

    @property
    def is_local(self) -> bool:
        return self.machine is None

    @property
    def interpreter(self) -> str:
        return self.python or (sys.executable if self.is_local else "python3")


def default_connect(machine: Machine) -> Any:
    from dtgui.remote.connection import connect

    return connect(machine, timeout=10.0)


def _parallel(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    """fn over items in threads; each result is the value or the exception raised."""
    def guarded(item: Any) -> Any:
        try:
            return fn(item)
        except Exception as exc:  # noqa: BLE001 - reported per machine
            return exc

    if not items:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(items))) as pool:
        return list(pool.map(guarded, items))


def _local_address(client: Any) -> str:
    """The address this machine used to reach a remote one (which can reach it back)."""
    sock = getattr(client.get_transport(), "sock", None)
    if isinstance(sock, socket.socket):
        return sock.getsockname()[0]
    return ""


class _Launch:
    """One launch in progress: the connections and what each step found."""

    def __init__(self, plan: Plan, assignments: Mapping[str, str], targets: list[Target],
                 connect: Connector, progress: ProgressFn | None, runs_root: Path,
                 keep_ports: bool) -> None:
        self.plan = plan
        self.assignments = {t: machine_key(m) for t, m in assignments.items()}
        used = list(dict.fromkeys(self.assignments.values()))
        by_name = {machine_key(t.name): t for t in targets}
        unknown = [m for m in used if m not in by_name]
        if unknown:
            raise LaunchError(f"No machine named {', '.join(unknown)} was chosen.")
        self.targets = [by_name[m] for m in used]
        self.connect = connect
        self.progress = progress or (lambda _text, _frac: None)
        self.bundle_dir = unique_run_dir(runs_root, plan.run_name)
        self.record = new_record(self.bundle_dir, plan)
        self.keep_ports = keep_ports and bool(plan.tasks)
        self.clients: dict[str, Any] = {}
        self.checks: dict[str, PythonCheck] = {}
        self.timings: dict[str, float] = {}
        self.script: ScriptStudy | None = None
        self._t = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.timings[name] = now - self._t
        self._t = now

    @property
    def remote(self) -> list[Target]:
        return [t for t in self.targets if not t.is_local]

    def close(self) -> None:
        for client in self.clients.values():
            client.close()

    def relative_dir(self, target: Target) -> str:
        """The run directory under the machine's home (made by the check)."""
        return remote_run_dir("", self.record.run_id, target.name).lstrip("/")

    def wanted_ports(self, target: Target) -> list[int]:
        """The ports the plan gives this machine's tasks (keep_ports), in task order."""
        if not self.keep_ports:
            return []
        return [t.port for t in self.plan.tasks if self.assignments.get(t.task_id) == target.name]

    # -- steps -------------------------------------------------------------------------------
    def connect_all(self) -> None:
        self.progress(f"Connecting to {len(self.remote)} machine(s)", 0.05)
        errors = []
        for target, result in zip(self.remote, _parallel(self.connect, [
                t.machine for t in self.remote]), strict=True):
            if isinstance(result, Exception):
                errors.append(f"{target.name}: {result}")
            else:
                self.clients[target.name] = result
        if errors:
            raise LaunchError("Could not connect: " + " ".join(errors))
        self.lap("connect")

    def check_all(self) -> None:
        """Python, TensorFlow, the run directory and the ports: one round trip a machine."""
        self.progress("Checking Python, TensorFlow and ports on every machine", 0.15)
        expected = expected_tf_version()
        script = self.script = study(self.plan)  # a user's own script: its code, looked at
        modules = script.modules if script is not None else ()
        data_dir = script.script.data_dir if script is not None else ""

        def one(target: Target) -> PythonCheck:
            runner = local_runner(target.interpreter) if target.is_local else \
                ssh_runner(self.clients[target.name], target.interpreter)
            wanted = self.wanted_ports(target)
            count = 0 if self.keep_ports else sum(
                1 for m in self.assignments.values() if m == target.name)
            return check_python(target.name, target.interpreter, runner, expected,
                                import_tf=not target.is_local,
                                directory="" if target.is_local else self.relative_dir(target),
                                port_count=count, ports=tuple(wanted), modules=modules,
                                data_dir=data_dir)

        problems = [script.refusal] if script is not None and script.refusal else []
        for target, result in zip(self.targets, _parallel(one, self.targets), strict=True):
            if isinstance(result, Exception):
                problems.append(f"{target.name}: the check failed ({result}).")
                continue
            self.checks[target.name] = result
            problems += result.problems
            if script is not None and result.executable:
                problems += machine_problems(script, result)
            tasks = [t for t in self.plan.tasks if self.assignments.get(t.task_id) == target.name]
            problems += [f"Port {t.port} on {target.name} (task {t.task_id}) is in use by "
                         "another process: choose other ports (or stop that process)."
                         for t in tasks if self.keep_ports and t.port in result.busy_ports]
        if expected is None and not problems:
            problems += check_versions_agree(list(self.checks.values()))
        if problems:
            raise LaunchError("Not launched: " + " ".join(problems))
        self.lap("check")

    def addresses(self) -> dict[str, str]:
        out = {}
        for target in self.targets:
            if target.address:
                out[target.name] = target.address
            elif target.is_local:
                found = [_local_address(c) for c in self.clients.values()]
                out[target.name] = next((a for a in found if a), "")
            else:
                out[target.name] = target.machine.host  # type: ignore[union-attr]
        return out

    def place(self) -> Plan:
        if self.keep_ports:
            ports = {t.name: self.wanted_ports(t) for t in self.targets}
        else:
            ports = {t.name: self.checks[t.name].free_ports for t in self.targets}
        machines = {t.name: t.machine for t in self.targets if t.machine is not None}
        known = list(machines.values())
        if any(m.jump_host.strip() for m in known):  # a jump host may be any registered machine
            known += MachineRegistry().machines()
        try:
            return place_plan(self.plan, self.assignments, machines, ports,
                              pythons={t.name: t.interpreter for t in self.targets},
                              gpus={t.name: t.gpus for t in self.targets if t.gpus},
                              known=known, addresses=self.addresses())
        except PlacementError as exc:
            raise LaunchError(str(exc)) from exc


def launch_on_machines(plan: Plan, assignments: Mapping[str, str], targets: list[Target],
                       runs_root: Path | None = None, *, connect: Connector | None = None,
                       policy: RunPolicy | None = None, progress: ProgressFn | None = None,
                       keep_ports: bool = False) -> RunController:
    """Start `plan` with its tasks on the chosen machines; returns the watching controller.

    `assignments`: task id -> machine name ("local" = this machine), e.g. from
    `dtgui.core.cluster.assign`. `targets`: the machines (with interpreter, address, GPUs).
    `keep_ports`: use the ports already in `plan.tasks` (bind-tested on each machine first)
    instead of choosing free ones.
    """
    launch = _Launch(plan, assignments, targets, connect or default_connect, progress,
                     runs_root or runs_dir(), keep_ports)
    try:
        launch.connect_all()
        launch.check_all()
        placed = launch.place()
        try:
            bundle = render_bundle(placed, launch.bundle_dir)
        except PlanError as exc:
            raise LaunchError(str(exc)) from exc
        problem = check_bundled_model(bundle)
        if problem:
            raise LaunchError(problem)
        launch.lap("render")
        record = launch.record
        record.run_name, record.strategy = placed.run_name, placed.strategy
        executors = _executors(launch, bundle, record)
        record.save()
        _upload(launch, executors, bundle)
        controller = RunController(bundle, executors=executors, record=record, policy=policy)
        if launch.script is not None and launch.script.notes:
            controller.metrics.add_log_lines(placed.tasks[0].task_id,
                                             [f"[dtgui] {n}" for n in launch.script.notes])
        launch.progress(f"Starting {len(placed.tasks)} task(s)", 0.9)
        try:  # the ports were bind-tested (or chosen free) by the check just before
            controller.start(check_ports=False)
        except LaunchError as exc:
            record.end("failed", str(exc), None)
            record.save()
            raise
        launch.lap("start")
        controller.launch_timings = launch.timings
        launch.progress("Running", 1.0)
        return controller
    except BaseException:
        launch.close()
        raise


def _executors(launch: _Launch, bundle: Bundle, record: RunRecord) -> list[Executor]:
    executors: list[Executor] = []
    for target in launch.targets:
        tasks = [t for t in bundle.plan.tasks if t.machine_name == target.name]
        address = bundle.plan.machines.get(target.name, {}).get("address", "")
        if target.is_local:
            executors.append(LocalExecutor(bundle, tasks, target.interpreter))
            record.machines.append(MachineRecord(LOCAL_MACHINE, str(bundle.path),
                                                 target.interpreter, address))
            continue
        machine = target.machine
        assert machine is not None
        directory = launch.checks[target.name].directory
        ex = SshExecutor(target.name, bundle, tasks,
                         connect=functools.partial(launch.connect, machine),
                         remote_dir=directory, python=target.interpreter,
                         client=launch.clients[target.name])
        ex.dir_ready = True
        executors.append(ex)
        record.machines.append(MachineRecord(target.name, directory, target.interpreter, address,
                                             machine.to_dict()))
    return executors


def _upload(launch: _Launch, executors: list[Executor], bundle: Bundle) -> None:
    remote = [ex for ex in executors if isinstance(ex, SshExecutor)]
    if not remote:
        return
    archive = bundle_archive(bundle)
    done: dict[str, int] = {}
    shown = [0.0]

    def report(machine: str, sent: int, total: int) -> None:
        done[machine] = sent
        fraction = sum(done.values()) / (len(remote) * len(archive) or 1)
        if fraction - shown[0] >= 0.05 or fraction >= 1:  # at most ~20 updates
            shown[0] = fraction
            launch.progress(f"Copying the bundle ({len(archive) // 1024} KiB) to "
                            f"{len(remote)} machine(s)", 0.3 + 0.55 * fraction)

    for ex in remote:
        ex.archive = archive
    results = _parallel(lambda e: e.prepare(report), remote)
    errors = [f"{ex.name}: {r}" for ex, r in zip(remote, results, strict=True)
              if isinstance(r, Exception)]
    if errors:
        raise LaunchError("Copying the bundle failed: " + " ".join(errors))
    for executor in executors:
        if not isinstance(executor, SshExecutor):
            executor.prepare()
    launch.lap("upload")


def reattach(record: RunRecord, *, connect: Connector | None = None,
             registry: MachineRegistry | None = None,
             policy: RunPolicy | None = None) -> RunController:
    """Follow a recorded run again: every machine is connected first (an error is raised and
    nothing changes when one cannot be), then its tasks are watched from their pids and every
    event is read again from the start."""
    connect = connect or default_connect
    bundle = Bundle.open(Path(record.bundle))
    pids = record.pids()

    def machine_of(rec: MachineRecord) -> Machine:
        found = registry.find(rec.name) if registry is not None else None
        return found or Machine.from_dict(rec.machine)

    remote = [m for m in record.machines if not m.is_local]
    machines = {m.name: machine_of(m) for m in remote}
    results = _parallel(lambda rec: connect(machines[rec.name]), remote)
    errors = [f"{rec.name}: {r}" for rec, r in zip(remote, results, strict=True)
              if isinstance(r, Exception)]
    if errors:
        for r in results:
            if not isinstance(r, Exception):
                r.close()
        raise LaunchError("Cannot reattach: " + " ".join(errors))
    clients = {rec.name: r for rec, r in zip(remote, results, strict=True)}
    executors: list[Executor] = []
    for rec in record.machines:
        tasks = [t for t in bundle.plan.tasks if t.machine_name == rec.name]
        if rec.is_local:
            ex: Executor = LocalExecutor(bundle, tasks, rec.python or None)
        else:
            m = machines[rec.name]
            ex = SshExecutor(rec.name, bundle, tasks, connect=functools.partial(connect, m),
                             remote_dir=rec.dir, python=rec.python, client=clients[rec.name])
        ex.adopt(pids)
        executors.append(ex)
    policy = policy or RunPolicy(max_restarts=record.max_restarts)
    controller = RunController(bundle, executors=executors, record=record, policy=policy)
    controller.restarts = record.restarts
    controller.attach()
    return controller
