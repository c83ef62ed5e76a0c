"""Targets whose tasks are processes dtgui starts (this machine, SSH machines): one
pre-launch check (`dtgui.launch.checks.precheck`: Python and TensorFlow, the run directory, free
ports or the plan's ports bind-tested, a user's script's imports, one round trip a machine)
and one placement across all of them (`dtgui.core.plans.placement.place_plan`)."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.machines.registry import MachineRegistry
from dtgui.core.plans.placement import PlacementError, place_plan, port_in_use
from dtgui.core.plans.plan import Plan
from dtgui.core.runs.records import TaskRecord
from dtgui.launch.checks.script_check import machine_problems
from dtgui.launch.drivers.base import Driver, Refused, command_runner, remove_through_host
from dtgui.launch.exec.executor import Executor
from dtgui.launch.exec.process_exec import ProcessExecutor
from dtgui.launch.launch_state import Launch
from dtgui.launch.targets import Target
from dtgui.worker.layout import pid_file
from dtgui.worker.machine_probe import choose_free_ports

if TYPE_CHECKING:
    from dtgui.remote.connection import SSHClient
    from dtgui.remote.connector import Connector


class ProcessDriver(Driver):
    """A kind whose tasks are processes started on the target; its runs share machines."""

    imports_tf = True  # the check imports TensorFlow there (this machine's is known)
    takes_tasks = True

    def directory(self, launch: Launch, target: Target) -> str:
        """The run directory the check makes (relative to the home; "" = none)."""
        return ""

    def check(self, launch: Launch, target: Target) -> list[str]:
        from dtgui.launch.checks.precheck import check_python

        script = launch.script
        result = check_python(
            target.label, target.interpreter,
            command_runner(target, launch.clients.get(target.name)), launch.expected_tf,
            import_tf=self.imports_tf, directory=self.directory(launch, target),
            port_count=0 if launch.keep_ports else launch.task_count(target),
            ports=tuple(launch.wanted_ports(target)),
            modules=script.modules if script is not None else (),
            data_dir=script.script.data_dir if script is not None else "")
        launch.checks[target.name] = result
        problems = list(result.problems)
        if script is not None and result.executable:
            problems += machine_problems(script, result)
        problems += [port_in_use(t.port, t.task_id, target.label) for t in launch.plan.tasks if launch.keep_ports and t.port
                     and launch.assignments.get(t.task_id) == target.name
                     and t.port in result.ports_in_use]
        return problems

    def tasks_left(self, executor: Executor, tasks: Sequence[TaskRecord]) -> dict[str, bool]:
        """Its process group is there, with the identity recorded at its start. A task
        recorded without a process group (its launcher died while starting it) by the pid
        file its wrapper wrote (the start removes an earlier one first): none, not started."""
        assert isinstance(executor, ProcessExecutor)
        host, stems = executor.host, {t.task_id: t.file_stem for t in executor.tasks}
        pids: dict[str, tuple[int, str]] = {}
        for task in tasks:
            pid = task.pid
            if not pid and task.task in stems:
                text = host.read_tail(executor.directory, pid_file(stems[task.task]), 32)
                pid = int(text) if text.strip().isdigit() else 0
            pids[task.task] = (pid, task.started)
        facts = host.groups([p for p, _ in pids.values() if p])
        return {t: bool(p) and facts.left(p, started) for t, (p, started) in pids.items()}

    def remove_copy(self, target: Target, bundle: Bundle, directory: str,
                    connector: Connector | None) -> None:
        executor = self.executor(target, bundle, directory, connector=connector)
        assert isinstance(executor, ProcessExecutor)
        remove_through_host(executor.host, directory)

    def place(self, launch: Launch) -> Plan:
        """Every task on its machine, with the ports the check found free (or the plan's)."""
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
        if any(m.jump_host.strip() for m in known):  # a jump host may be any registered one
            known += MachineRegistry().machines()
        addresses = {t.name: _address(launch, t) for t in launch.targets}
        try:
            return place_plan(launch.plan, launch.assignments, machines, ports,
                              pythons={t.name: t.interpreter for t in launch.targets},
                              gpus={t.name: t.gpus for t in launch.targets if t.gpus},
                              known=known, addresses=addresses)
        except PlacementError as exc:
            raise Refused(str(exc)) from exc


def _address(launch: Launch, target: Target) -> str:
    """The address the other machines reach the target at: the one given, a registered
    machine's host, this machine's end of its SSH connections (which can reach it back)."""
    if target.address:
        return target.address
    if target.machine is not None:
        return target.machine.host
    found = [_local_address(c) for c in launch.clients.values()]
    return next((a for a in found if a), "")


def _local_address(client: SSHClient) -> str:
    """The address this machine used to reach a remote one."""
    transport = client.get_transport()
    sock = getattr(transport, "sock", None)
    if isinstance(sock, socket.socket):
        return str(sock.getsockname()[0])
    return ""
