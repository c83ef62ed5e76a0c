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
* `takes_tasks`: its registered machines take tasks among a run's other machines (else a
  registered machine of the kind is its own target, e.g. a cluster's login node);
* `target_of_job`: the target of what the wizard's box for the kind made (a Slurm job);
* `trial_job`: the job each trial of a sweep is on a registered machine the kind owns,
  `trial_target_text` how the sweep dialog offers that machine, `job_from_dict` the job
  read back from sweep.json;
* `export`: the bundle of such a job written for a run without dtgui, and how to start it;
* `cleanup`: what a launch that did not start leaves on the target, removed;
* `machine_target`: a registered machine of the kind as one target among a run's machines
  (a kind whose runs share machines);
* `task_modules`: its part of the task program, copied into its bundles beside the worker
  package;
* `bundle_job`: the job a bundle was rendered as (a clone, an export), `old_record`: a
  record written before records kept their kind is this kind's;
* `remove_copy`: a run's copy on the target deleted (the Runs page's delete);
* `errors`: its exceptions a command line reports as a refusal (their message);
* `probes`, `probe_text`, `probe_facts`: its own part of the Machines panel's probe;
* `tracking_tags`, `tracking_files`: what MLflow gets of its runs besides every run's;
* `resume_refusal`: why a run of the kind resumes where it ran;
* `tasks_left`: whether a recorded task may still run (its process group, its job).

A bundle rendered already (`dtgui run BUNDLE`) finds its targets with `bundle_target`.
Every driver overrides `REQUIRED_HOOKS`; a plugin's driver that does not is reported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.machines.registry import Machine, MachineRegistry
from dtgui.core.plans.plan import Plan
from dtgui.core.runs.records import MachineRecord, TaskRecord
from dtgui.core.target_job import TargetJob
from dtgui.launch.exec.executor import Executor
from dtgui.launch.exec.host import Host
from dtgui.launch.launch_state import Launch
from dtgui.launch.targets import Target

if TYPE_CHECKING:  # paramiko is imported only when a target needs it
    from dtgui.core.machines.registry import RemoteFacts
    from dtgui.core.runs.records import RunRecord
    from dtgui.remote.commands import CommandRunner
    from dtgui.remote.connection import SSHClient
    from dtgui.remote.connector import Connector

Copied = Callable[[int, int], None]  # (bytes sent, bytes in all)
REQUIRED_HOOKS = ("place", "executor", "reattach")  # no default does for these


class Refused(Exception):
    """A driver refuses the launch: the message says why (the pipeline reports it)."""


class Driver:
    """One kind of target. Subclasses set `kind` and override what applies to them."""

    kind = ""
    whole_run = ""  # why a run on this kind takes no other machine ("" = it shares a run)
    takes_tasks = False  # its registered machines take tasks among a run's other machines
    errors: tuple[type[Exception], ...] = ()  # what a command line reports as a refusal
    probes = False  # the Machines panel asks `probe_facts` of its registered machines
    probe_text = ""  # what the panel says while it does ("probing the login node...")

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

    def target_of_job(self, job: TargetJob,
                      machines: Mapping[str, Machine]) -> Target | None:
        """The target of a job the wizard made for this kind (None: not this kind's job).
        `machines`: the registered machines by name. Refused for a job of this kind whose
        machine is not among them."""
        return None

    def trial_job(self, plan: Plan, machine: Machine) -> TargetJob:
        """The job each trial of a sweep over `plan` is on `machine`, a registered machine
        this kind owns (from its registered defaults). Refused when they make no job."""
        raise Refused(f"{machine.name} takes no sweep's trials as jobs")

    def trial_target_text(self, machine: Machine) -> str:
        """How the sweep dialog's "Trials run on" offers `machine`, one this kind owns."""
        return f"{machine.name} (a job a trial)"

    def job_from_dict(self, data: dict[str, Any]) -> TargetJob:
        """The trial job whose fields sweep.json keeps (its `to_dict()`). ValueError or
        TypeError when they make no job of this kind."""
        raise ValueError(f"targets of kind {self.kind!r} take no sweep's trials as jobs")

    def export(self, plan: Plan, destination: Path,
               job: TargetJob) -> tuple[Bundle, str] | None:
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

    # -- the kind's machines, bundles and records ------------------------------------------
    def machine_target(self, machine: Machine, python: str | None = None,
                       gpus: tuple[int, ...] = ()) -> Target:
        """A registered machine of this kind as one target among a run's machines
        (`python`: None = its registered Python). Refused by a kind that takes a run
        whole."""
        raise Refused(f"{machine.name} takes no tasks among other machines")

    def task_modules(self) -> dict[str, Path]:
        """Its part of the task program: the module's name in the bundle -> its source,
        copied beside the worker package (`dtgui.core.bundle.add_task_modules`)."""
        return {}

    def bundle_job(self, path: Path) -> TargetJob | None:
        """The job the bundle at `path` was rendered as for this kind (None: not such a
        bundle): the wizard refills its box from it, an export writes it again."""
        return None

    def old_record(self, rec: MachineRecord) -> bool:
        """Whether a recorded machine without a kind (an older dtgui's record) is this
        kind's, told by its fields."""
        return False

    def remove_copy(self, target: Target, bundle: Bundle, directory: str,
                    connector: Connector | None) -> None:
        """Delete a run's copy kept on the target: `directory` (absolute) and everything in
        it. Refused when the kind keeps no copy dtgui can remove; else raises what removing
        it raised."""
        raise Refused(f"{target.name}: its kind keeps no copy dtgui can remove")

    def probe_facts(self, machine: Machine, runner: CommandRunner,
                    facts: RemoteFacts) -> None:
        """Its own part of the probe of `machine`, one of its registered machines, asked
        through `runner` (over SSH when the kind's machines are reached so, else here), into
        `facts.kind_facts` (and its warnings)."""

    def tracking_tags(self, record: RunRecord) -> dict[str, str]:
        """MLflow tags of a run with a target of this kind, besides every run's."""
        return {}

    def tracking_files(self, root: Path) -> list[Path]:
        """Files of a run's bundle (at `root`) MLflow keeps besides every run's."""
        return []

    def tasks_left(self, executor: Executor, tasks: Sequence[TaskRecord]) -> dict[str, bool]:
        """Task -> whether it may still run, of the recorded `tasks` on `executor`'s machine
        (a run's record says it runs: `dtgui.launch.start.run_check`). A task left out cannot
        be told; raises what the executor raises when its machine does not answer."""
        return {}

    def resume_refusal(self) -> str:
        """Why a run of this kind cannot move when it resumes ("" = it can)."""
        return ""


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


def remove_through_host(host: Host, directory: str) -> None:
    """A run's copy in `directory` removed through the host its executor reaches it by."""
    try:
        host.remove_tree(directory)
    finally:
        host.close()
