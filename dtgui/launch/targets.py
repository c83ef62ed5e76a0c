"""Where a run's tasks run: the kinds of target, and the one executor factory.

A `Target` is one machine of a run. Its `TargetKind` says how dtgui reaches it:

* `LOCAL`: this machine; its tasks are processes started here (`LocalExecutor`).
* `SSH`: a registered machine; its tasks are started and watched over one SSH connection
  (`SshExecutor`), the bundle copied there first.
* `SLURM`: a Slurm cluster, reached at its login node (this machine, or a registered machine
  over SSH); the tasks are one batch job (`SlurmExecutor`, `RemoteSlurmExecutor` over SSH;
  `dtgui.core.slurm` for the job).

The launch pipeline (`dtgui.launch.pipeline`) and a reattach ask a target's kind what applies
to it: whether it needs a connection, how commands run there (`command_runner`: the same check
runs locally or over SSH), and which executor follows its tasks (`make_executor`, used by the
launch, the reattach and a bundle run here alike). A new kind of target (a Slurm job) adds a
member and its cases here: how it is reached (`needs_connection`), how commands run there
(`command_runner`), what follows its tasks (`make_executor`), and what the run record keeps of
it (`machine_record`, read back by `Target.of_record`).
"""

from __future__ import annotations

import enum
import functools
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dtgui.core.bundle import Bundle
from dtgui.core.machines import Machine, MachineRegistry
from dtgui.core.plan import LOCAL_MACHINE, Plan
from dtgui.core.runs import MachineRecord
from dtgui.core.slurm import SlurmJob
from dtgui.launch.executor import Executor
from dtgui.launch.local_exec import LocalExecutor

if TYPE_CHECKING:  # paramiko is imported only when a target needs it
    from dtgui.remote.commands import CommandRunner
    from dtgui.remote.connection import SSHClient
    from dtgui.remote.connector import Connector

LOCAL_LABEL = "this machine"  # how messages name the local target


class TargetKind(enum.Enum):
    LOCAL = "local"  # processes on this machine
    SSH = "ssh"  # a registered machine, over SSH
    SLURM = "slurm"  # a Slurm cluster: the tasks are one batch job


@dataclass(frozen=True)
class Target:
    """A machine a plan may use: this one (machine None) or a registered one."""

    name: str = LOCAL_MACHINE
    machine: Machine | None = None
    python: str = ""  # "" = this process's interpreter here, `python3` on a remote machine
    address: str = ""  # the address the other machines reach it at ("" = found out)
    gpus: tuple[int, ...] = ()
    slurm: SlurmJob | None = None  # a Slurm cluster: the job the tasks are (machine: its
    # login node over SSH; None: this machine is the login node)

    @classmethod
    def cluster(cls, machine: Machine, **job: object) -> Target:
        """A registered cluster as the target of one job: its defaults, then `job`'s values
        that are not None (SlurmJob's fields)."""
        assert machine.slurm is not None, f"{machine.name} is not a Slurm cluster"
        settings = SlurmJob.from_defaults(machine.name, machine.slurm,
                                          python=machine.python or None, **job)
        return cls(machine.name, machine, machine.python, slurm=settings)

    @property
    def kind(self) -> TargetKind:
        if self.slurm is not None:
            return TargetKind.SLURM
        return TargetKind.LOCAL if self.machine is None else TargetKind.SSH

    @property
    def is_local(self) -> bool:
        return self.kind is TargetKind.LOCAL

    @property
    def needs_connection(self) -> bool:
        return self.machine is not None

    @property
    def interpreter(self) -> str:
        return self.python or (sys.executable if self.is_local else "python3")

    @property
    def label(self) -> str:
        """The machine as messages name it."""
        return LOCAL_LABEL if self.is_local else self.name

    @classmethod
    def of_record(cls, rec: MachineRecord, registry: MachineRegistry | None = None) -> Target:
        """The target of a recorded run's machine (its registered settings when it is still
        registered, else those recorded at launch)."""
        if rec.job_id:  # a Slurm job: its settings are the bundle's (make_executor)
            machine = Machine.from_dict(rec.machine) if rec.machine else None
            return cls(rec.name, machine, rec.python, rec.address,
                       slurm=SlurmJob(cluster=rec.name))
        if rec.is_local:
            return cls(LOCAL_MACHINE, None, rec.python, rec.address)
        found = registry.find(rec.name) if registry is not None else None
        return cls(rec.name, found or Machine.from_dict(rec.machine), rec.python, rec.address)


def plan_targets(plan: Plan, machines: Mapping[str, Machine]) -> list[Target]:
    """The targets of a placed plan: its machines in task order, each with the interpreter
    and the GPUs chosen for it (the wizard's placement). `machines`: the registered
    machines by name (KeyError for one that is not)."""
    gpus: dict[str, list[int]] = {}
    for task in plan.tasks:  # the GPUs chosen per machine, in task order
        chosen = gpus.setdefault(task.machine_name, [])
        chosen.extend(g for g in task.gpus if g not in chosen)
    return [Target(name, None if name == LOCAL_MACHINE else machines[name],
                   plan.machine(name).python, gpus=tuple(gpus[name]))
            for name in plan.machine_names]


def command_runner(target: Target, client: SSHClient | None) -> CommandRunner:
    """How commands (the pre-launch check) run on the target: the same argv, here or over
    its SSH connection."""
    from dtgui.remote.commands import LocalRunner, SshRunner

    if target.needs_connection:
        assert client is not None, f"{target.name} is not connected"
        return SshRunner(client)
    return LocalRunner()


def machine_record(target: Target, run_dir: str, address: str) -> MachineRecord:
    """What the run record keeps of a target (enough to reattach)."""
    machine = target.machine.to_dict() if target.machine is not None else {}
    return MachineRecord(target.name, run_dir, target.interpreter, address, machine)


def make_executor(target: Target, bundle: Bundle, run_dir: str, *,
                  connector: Connector | None = None, client: SSHClient | None = None,
                  dir_ready: bool = False) -> Executor:
    """The executor of the target's tasks of `bundle`, for a launch and a reattach alike.
    `run_dir`: the bundle directory on the target; `client`: a connection made already;
    `dir_ready`: the pre-launch check made `run_dir` already."""
    tasks = [t for t in bundle.plan.tasks if t.machine_name == target.name]
    if target.kind is TargetKind.LOCAL:
        return LocalExecutor(bundle, tasks, target.interpreter)
    if target.kind is TargetKind.SLURM:
        if target.machine is not None:  # the login node over SSH
            from dtgui.launch.slurm_remote import RemoteSlurmExecutor

            assert connector is not None
            remote = RemoteSlurmExecutor(target.name, bundle, tasks, run_dir=run_dir,
                                         reconnect=functools.partial(connector, target.machine),
                                         client=client)
            remote.dir_ready = dir_ready
            return remote
        from dtgui.launch.slurm_exec import SlurmExecutor

        return SlurmExecutor(target.name, bundle, tasks, command_runner(target, None), run_dir)
    from dtgui.launch.ssh_exec import SshExecutor

    assert target.machine is not None and connector is not None
    executor = SshExecutor(target.name, bundle, tasks,
                           reconnect=functools.partial(connector, target.machine),
                           remote_dir=run_dir, python=target.interpreter, client=client)
    executor.dir_ready = dir_ready
    return executor
