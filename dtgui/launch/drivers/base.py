"""What a kind of target does at each step of a launch: the `Driver` protocol.

The launch pipeline (`dtgui.launch.start.pipeline`) runs its steps over a run's targets and asks
each target's driver (`dtgui.launch.drivers.driver_for`) for what depends on its kind; it
never asks which kind a target is. A driver:

* `checks` / `check`: whether the pre-launch check runs on a target, and the check itself
  (problems, one sentence each; what it found goes into the `Launch`: `checks`, `dirs`,
  `notes`);
* `place`: the tasks on the run's targets (`whole_run`: a kind whose run takes no other
  machine says why; the other kinds share one placement, `ProcessDriver.place`);
* `render`: its own files in the rendered bundle;
* `executor`: what starts and follows its tasks, for a launch and a reattach alike;
* `upload`: the bundle copied to a target reached over SSH;
* `record` / `reattach`: what the run record keeps of a target, and the target of a
  recorded machine;
* `started`: what a command line says once the tasks started ("" = nothing);
* `owns`: whether a registered machine is this kind's (a Slurm cluster's login node), so
  no machine tasks are placed on over SSH;
* `target_of_job`: the target of what the wizard's box for the kind made (a Slurm job);
* `trial_job`: the job each trial of a sweep is on a registered machine the kind owns,
  `trial_target_text` how the sweep dialog offers that machine, `job_from_dict` the job
  read back from sweep.json;
* `export`: the bundle of such a job written for a run without dtgui, and how to start it;
* `cleanup`: what a launch that did not start leaves on the target, removed.

A bundle rendered already (`dtgui run BUNDLE`) finds its targets with `bundle_target`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.machines.registry import Machine, MachineRegistry
from dtgui.core.plans.plan import Plan
from dtgui.core.runs.records import MachineRecord
from dtgui.core.sweeps.sweep import TrialJob
from dtgui.launch.exec.executor import Executor
from dtgui.launch.launch_state import Launch
from dtgui.launch.targets import Target

if TYPE_CHECKING:  # paramiko is imported only when a target needs it
    from dtgui.remote.commands import CommandRunner
    from dtgui.remote.connection import SSHClient
    from dtgui.remote.connector import Connector

Copied = Callable[[int, int], None]  # (bytes sent, bytes in all)


class Refused(Exception):
    """A driver refuses the launch: the message says why (the pipeline reports it)."""


class Driver:
    """One kind of target. Subclasses set `kind` and override what applies to them."""

    kind = ""
    whole_run = ""  # why a run on this kind takes no other machine ("" = it shares a run)

    # -- check -----------------------------------------------------------------------------
    def checks(self, launch: Launch, target: Target) -> bool:
        """Whether the pre-launch check runs on the target."""
        return True

    def check(self, launch: Launch, target: Target) -> list[str]:
        """The target checked before anything starts: the problems found."""
        return []

    # -- place and render ------------------------------------------------------------------
    def place(self, launch: Launch) -> Plan:
        """The plan with every task placed on the launch's targets. Raises Refused."""
        raise NotImplementedError

    def render(self, launch: Launch, target: Target, bundle: Bundle) -> None:
        """Its own files written into the rendered bundle."""

    # -- record, executor, upload ----------------------------------------------------------
    def record(self, target: Target, run_dir: str, address: str) -> MachineRecord:
        """What the run record keeps of the target (enough to reattach)."""
        machine = target.machine.to_dict() if target.machine is not None else {}
        return MachineRecord(target.name, run_dir, target.interpreter, address, machine,
                             kind=self.kind)

    def executor(self, target: Target, bundle: Bundle, run_dir: str, *,
                 connector: Connector | None = None, client: SSHClient | None = None,
                 dir_ready: bool = False) -> Executor:
        """The executor of the target's tasks of `bundle`. `run_dir`: the bundle directory
        on the target; `client`: a connection made already; `dir_ready`: the pre-launch
        check made `run_dir` already."""
        raise NotImplementedError

    def upload(self, executor: Executor, archive: bytes, copied: Copied) -> None:
        """The bundle (`archive`, made once for every target of the launch) copied to a
        target reached over a connection."""
        executor.archive = archive
        executor.prepare(copied)

    def started(self, executor: Executor) -> str:
        """What the command line says once the target's tasks started."""
        return ""

    # -- reattach, a rendered bundle, clean-up ---------------------------------------------
    def reattach(self, rec: MachineRecord, registry: MachineRegistry | None) -> Target:
        """The target of a recorded run's machine."""
        raise NotImplementedError

    def owns(self, machine: Machine) -> bool:
        """Whether a registered machine is this kind's: it takes a run whole, and is no
        machine for single tasks over SSH."""
        return False

    def target_of_job(self, job: object,
                      machines: Mapping[str, Machine]) -> Target | None:
        """The target of a job the wizard made for this kind (None: not this kind's job).
        `machines`: the registered machines by name. Refused for a job of this kind whose
        machine is not among them."""
        return None

    def trial_job(self, plan: Plan, machine: Machine) -> TrialJob:
        """The job each trial of a sweep over `plan` is on `machine`, a registered machine
        this kind owns (from its registered defaults). Refused when they make no job."""
        raise Refused(f"{machine.name} takes no sweep's trials as jobs")

    def trial_target_text(self, machine: Machine) -> str:
        """How the sweep dialog's "Trials run on" offers `machine`, one this kind owns."""
        return f"{machine.name} (a job a trial)"

    def job_from_dict(self, data: dict[str, Any]) -> TrialJob:
        """The trial job whose fields sweep.json keeps (its `to_dict()`). ValueError or
        TypeError when they make no job of this kind."""
        raise ValueError(f"targets of kind {self.kind!r} take no sweep's trials as jobs")

    def export(self, plan: Plan, destination: Path,
               job: object) -> tuple[Bundle, str] | None:
        """The bundle of `plan` as a job the wizard made for this kind, written to
        `destination` for a run without dtgui, and how to start it there (a sentence that
        ends with the commands); None: not this kind's job."""
        return None

    def bundle_target(self, bundle: Bundle,
                      registry: MachineRegistry | None) -> Target | None:
        """The target a bundle rendered for this kind runs on (None: not such a bundle).
        Raises Refused when it is one but its target cannot be found."""
        return None

    def cleanup(self, launch: Launch, target: Target) -> None:
        """What a launch that did not start made on the target, removed."""


def command_runner(target: Target, client: SSHClient | None) -> CommandRunner:
    """How commands (the pre-launch check) run on the target: the same argv, here or over
    its SSH connection."""
    from dtgui.remote.commands import LocalRunner, SshRunner

    if target.needs_connection:
        assert client is not None, f"{target.name} is not connected"
        return SshRunner(client)
    return LocalRunner()


def registered(machine: Machine | None, name: str,
               registry: MachineRegistry | None) -> Machine | None:
    """A recorded machine's registered settings when it is still registered, else those
    recorded at launch."""
    found = registry.find(name) if registry is not None else None
    return found or machine

