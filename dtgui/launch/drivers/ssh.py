"""A registered machine reached over SSH: its tasks are processes started and watched over
one SSH connection (`SshExecutor`); the check makes the run directory under its home and
the bundle is copied there."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.machines.registry import Machine, MachineRegistry
from dtgui.core.runs.records import MachineRecord
from dtgui.launch.drivers.base import registered
from dtgui.launch.drivers.processes import ProcessDriver
from dtgui.launch.exec.executor import Executor
from dtgui.launch.launch_state import Launch
from dtgui.launch.targets import SSH_KIND, Target

if TYPE_CHECKING:
    from dtgui.remote.connection import SSHClient
    from dtgui.remote.connector import Connector

KIND = SSH_KIND


def ssh_target(machine: Machine, python: str | None = None, gpus: tuple[int, ...] = (),
               address: str = "") -> Target:
    """A registered machine (`python`: None = its registered Python)."""
    return Target(machine.name, machine, machine.python if python is None else python,
                  address, gpus, kind=KIND)


class SshDriver(ProcessDriver):
    kind = KIND

    def directory(self, launch: Launch, target: Target) -> str:
        from dtgui.launch.exec.ssh_exec import remote_run_dir

        return remote_run_dir("", launch.record.run_id, target.name).lstrip("/")

    def check(self, launch: Launch, target: Target) -> list[str]:
        problems = super().check(launch, target)
        launch.dirs[target.name] = launch.checks[target.name].directory
        return problems

    def executor(self, target: Target, bundle: Bundle, run_dir: str, *,
                 connector: Connector | None = None, client: SSHClient | None = None,
                 dir_ready: bool = False) -> Executor:
        from dtgui.launch.exec.ssh_exec import SshExecutor

        assert target.machine is not None and connector is not None
        tasks = [t for t in bundle.plan.tasks if t.machine_name == target.name]
        executor = SshExecutor(target.name, bundle, tasks,
                               reconnect=functools.partial(connector, target.machine),
                               remote_dir=run_dir, python=target.interpreter, client=client)
        executor.dir_ready = dir_ready
        return executor

    def reattach(self, rec: MachineRecord, registry: MachineRegistry | None) -> Target:
        machine = registered(Machine.from_dict(rec.machine), rec.name, registry)
        assert machine is not None
        return ssh_target(machine, rec.python, address=rec.address)
