"""A Slurm cluster as a target: the run's tasks are one batch job, submitted at the
cluster's login node (this machine, or a registered machine over SSH) and placed by Slurm.

Checked with `sinfo` against the job (`dtgui.kinds.slurm.remote.check_job`); on a login node
reached over SSH the check makes the run's directory on the cluster's shared filesystem, the
bundle is copied there, and a launch that does not start removes it. The tasks are placed in
rank order (their ports are chosen on the nodes) and the bundle gets its batch script
(`dtgui.kinds.slurm.batch_bundle`); `SlurmExecutor` (here) or `RemoteSlurmExecutor` (over SSH)
submit and follow the job.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dtgui.core.bundles.bundle import Bundle, add_task_modules
from dtgui.core.machines.registry import Machine, MachineRegistry
from dtgui.core.plans.plan import LOCAL_MACHINE, Plan
from dtgui.core.runs.records import MachineRecord, RunRecord, TaskRecord
from dtgui.core.target_job import TargetJob
from dtgui.kinds.slurm.executor import SlurmExecutor
from dtgui.kinds.slurm.job import (
    JOB_FILE,
    JOB_KIND,
    LOCAL_CLUSTER,
    TASK_MODULE,
    SlurmError,
    SlurmJob,
    cluster_defaults,
)
from dtgui.launch.drivers.base import Driver, Refused, command_runner, remove_through_host
from dtgui.launch.exec.executor import Executor
from dtgui.launch.launch_state import Launch
from dtgui.launch.targets import Target

if TYPE_CHECKING:
    from dtgui.core.machines.registry import RemoteFacts
    from dtgui.remote.commands import CommandRunner
    from dtgui.remote.connection import SSHClient
    from dtgui.remote.connector import Connector

KIND = JOB_KIND
DEFAULT_SHARED_DIR = "dtgui-runs"  # under the login node's home, when none is registered


def cluster_target(machine: Machine | None, job: SlurmJob) -> Target:
    """A Slurm cluster as the target of one job: `machine` its registered login node (None:
    this machine is the login node)."""
    if machine is None:
        return Target(LOCAL_MACHINE, None, job.python, job=job, kind=KIND)
    return Target(machine.name, machine, job.python or machine.python, job=job, kind=KIND)


def cluster_job_target(machine: Machine, **job: Any) -> Target:
    """A registered cluster as the target of one job: its defaults, then `job`'s values that
    are not None (SlurmJob's fields)."""
    defaults = cluster_defaults(machine)
    assert defaults is not None, f"{machine.name} is not a Slurm cluster"
    return cluster_target(machine, SlurmJob.from_defaults(
        machine.name, defaults, python=machine.python or None, **job))


def job_target(job: SlurmJob, registry: MachineRegistry | None = None) -> Target | None:
    """The target of `job` on its cluster: this machine for `local`, else the registered
    cluster of its name (None when no cluster is registered so)."""
    if job.cluster == LOCAL_CLUSTER:
        return cluster_target(None, job)
    machine = (registry or MachineRegistry()).find(job.cluster)
    if cluster_defaults(machine) is None:
        return None
    return cluster_target(machine, job)


def _job(target: Target) -> SlurmJob:
    assert isinstance(target.job, SlurmJob), f"{target.name} has no Slurm job"
    return target.job


class SlurmDriver(Driver):
    kind = KIND
    whole_run = ("a run on a Slurm cluster runs all its tasks there; it cannot take other "
                 "machines too.")
    errors = (SlurmError,)
    probes = True
    probe_text = "probing the login node and Slurm (sinfo, squeue)"

    def check(self, launch: Launch, target: Target) -> list[str]:
        """The job against the cluster's partitions (`sinfo` on the login node), then the
        run's directory on the shared filesystem."""
        from dtgui.kinds.slurm.remote import ask_slurm, check_job, make_run_dir

        job = _job(target)
        runner = command_runner(target, launch.clients.get(target.name))
        try:
            facts = ask_slurm(runner)
        except SlurmError as exc:
            return [str(exc)]
        if not facts.version:
            return facts.problems[:1]
        found = check_job(runner, job, facts)
        launch.notes += found.notes
        if found.problems or target.machine is None:
            return found.problems
        defaults = cluster_defaults(target.machine)
        shared = defaults.shared_dir if defaults is not None else DEFAULT_SHARED_DIR
        try:
            launch.dirs[target.name] = make_run_dir(runner, shared, launch.record.run_id)
        except SlurmError as exc:
            return [f"{target.label}: {exc}"]
        return []

    def place(self, launch: Launch) -> Plan:
        from dtgui.kinds.slurm.batch_bundle import place_on_cluster
        from dtgui.kinds.slurm.job import job_problems

        (target,) = launch.targets
        job = _job(target)
        placed = place_on_cluster(launch.plan, job)
        problems = job_problems(placed, job)
        if problems:
            raise Refused(" ".join(problems))
        return placed

    def render(self, launch: Launch, target: Target, bundle: Bundle) -> None:
        from dtgui.kinds.slurm.batch_bundle import write_slurm_files

        write_slurm_files(bundle, _job(target))
        add_task_modules(bundle, self.task_modules())

    def task_modules(self) -> dict[str, Path]:
        return {TASK_MODULE: Path(__file__).with_name("task.py")}

    def executor(self, target: Target, bundle: Bundle, run_dir: str, *,
                 connector: Connector | None = None, client: SSHClient | None = None,
                 dir_ready: bool = False) -> Executor:
        tasks = [t for t in bundle.plan.tasks if t.machine_name == target.name]
        if target.machine is not None:  # the login node over SSH
            from dtgui.kinds.slurm.executor_ssh import RemoteSlurmExecutor

            assert connector is not None
            remote = RemoteSlurmExecutor(target.name, bundle, tasks, run_dir=run_dir,
                                         reconnect=functools.partial(connector, target.machine),
                                         client=client)
            remote.dir_ready = dir_ready
            return remote
        return SlurmExecutor(target.name, bundle, tasks, command_runner(target, None), run_dir)

    def tasks_left(self, executor: Executor, tasks: Sequence[TaskRecord]) -> dict[str, bool]:
        """Its job waits or runs (a job Slurm no longer knows of cannot be told apart from a
        controller that does not answer: left out). A task recorded without its job (its
        launcher died while submitting it): a job Slurm holds in the run's directory."""
        from dtgui.kinds.slurm import remote as slurm

        assert isinstance(executor, SlurmExecutor)
        out: dict[str, bool] = {}
        unrecorded = [t for t in tasks if not t.job_id]
        if unrecorded:
            held = bool(slurm.jobs_in(executor.runner, executor.run_dir))
            out.update(dict.fromkeys((t.task for t in unrecorded), held))
        jobs = {t.job_id for t in tasks if t.job_id}
        states = {job: slurm.status(executor.runner, job) for job in jobs}
        out.update({t.task: states[t.job_id].active or states[t.job_id].queued
                    for t in tasks if t.job_id and states[t.job_id].state})
        return out

    def started(self, executor: Executor) -> str:
        assert isinstance(executor, SlurmExecutor)
        return f"submitted Slurm job {executor.job_id}; Ctrl-C cancels it"

    def reattach(self, rec: MachineRecord, registry: MachineRegistry | None) -> Target:
        """Its job's settings are the bundle's (the executor reads them)."""
        machine = Machine.from_dict(rec.machine) if rec.machine else None
        return Target(rec.name, machine, rec.python, rec.address,
                      job=SlurmJob(cluster=rec.name), kind=KIND)

    def trial_target_text(self, machine: Machine) -> str:
        return f"Slurm cluster {machine.name} (a job a trial)"

    def job_from_dict(self, data: dict[str, Any]) -> SlurmJob:
        return SlurmJob.from_dict(data)

    def target_of_job(self, job: TargetJob,
                      machines: Mapping[str, Machine]) -> Target | None:
        if not isinstance(job, SlurmJob):
            return None
        machine = machines.get(job.cluster)
        if job.cluster != LOCAL_CLUSTER and cluster_defaults(machine) is None:
            raise Refused(f"No Slurm cluster is registered as {job.cluster!r} (local = this "
                          "machine is the login node).")
        return cluster_target(machine, job)

    def trial_job(self, plan: Plan, machine: Machine) -> SlurmJob:
        """Its defaults, a task a node (as `dtgui export --slurm` without --nodes)."""
        from dtgui.core.plans.placement import task_layout

        defaults = cluster_defaults(machine)
        assert defaults is not None, f"{machine.name} is not a Slurm cluster"
        try:
            return SlurmJob.from_defaults(
                machine.name, defaults, python=machine.python or None,
                nodes=len(task_layout(plan)), tasks_per_node=1).validate()
        except SlurmError as exc:
            raise Refused(f"The Slurm cluster {machine.name}'s defaults make no job: "
                          f"{exc}") from None

    def export(self, plan: Plan, destination: Path,
               job: TargetJob) -> tuple[Bundle, str] | None:
        from dtgui.kinds.slurm.batch_bundle import render_slurm_bundle

        if not isinstance(job, SlurmJob):
            return None
        bundle = render_slurm_bundle(plan, destination, job)
        add_task_modules(bundle, self.task_modules())
        return bundle, ("on the cluster's login node, from the bundle on the shared "
                        f"filesystem:\n  cd {bundle.path}   (or where you copied it)\n"
                        "  sbatch job.sbatch")

    def bundle_job(self, path: Path) -> SlurmJob | None:
        return SlurmJob.load(path)

    def old_record(self, rec: MachineRecord) -> bool:
        return bool(rec.job_id)

    def remove_copy(self, target: Target, bundle: Bundle, directory: str,
                    connector: Connector | None) -> None:
        executor = self.executor(target, bundle, directory, connector=connector)
        assert isinstance(executor, SlurmExecutor)
        remove_through_host(executor.host, directory)

    def probe_facts(self, machine: Machine, runner: CommandRunner,
                    facts: RemoteFacts) -> None:
        from dtgui.kinds.slurm.remote import ask_slurm

        facts.kind_facts = ask_slurm(runner)
        python = facts.python_command
        if not facts.python_path and python != "python3":  # the nodes' Python, not the login's
            facts.warnings = [f"{python} is not on the login node's PATH: the cluster's setup "
                              "lines (module load, venv, conda) must give it on the nodes."]

    def tracking_tags(self, record: RunRecord) -> dict[str, str]:
        jobs = sorted({m.job_id for m in record.machines if m.job_id})
        return {"dtgui.slurm_job": ",".join(jobs)} if jobs else {}

    def tracking_files(self, root: Path) -> list[Path]:
        return [root / JOB_FILE]

    def resume_refusal(self) -> str:
        return ("a run on a Slurm cluster resumes on its cluster, as it was submitted (its "
                "checkpoints are on that cluster's shared filesystem).")

    def bundle_target(self, bundle: Bundle,
                      registry: MachineRegistry | None) -> Target | None:
        job = SlurmJob.load(bundle.path)
        if job is None:
            return None
        target = job_target(job, registry)
        if target is None:
            raise Refused(f"no Slurm cluster is registered as {job.cluster!r}: add its login "
                          "node in the Machines panel (or submit job.sbatch there by hand)")
        return target

    def cleanup(self, launch: Launch, target: Target) -> None:
        """A launch that did not start leaves nothing on the cluster's shared filesystem."""
        from dtgui.remote.commands import remove_run_dir

        made = launch.dirs.get(target.name)
        if made:
            with contextlib.suppress(Exception):  # the launch's own error is the one reported
                remove_run_dir(command_runner(target, launch.clients.get(target.name)), made)
