"""The kinds of target a run can use, one driver each, and the targets they make.

`DRIVERS` maps a kind to its driver (`dtgui.launch.drivers.base.Driver`); a kind is added by
its module and one `register` line below. The launch pipeline, the reattach, `dtgui run`,
sweep slots and the wizard reach targets through here: `driver_for(target)`,
`target_of_record`, `bundle_targets`, and the constructors (`local_target`, `ssh_target`,
`cluster_target`, `plan_targets`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.machines.registry import Machine, MachineRegistry
from dtgui.core.plans.plan import LOCAL_MACHINE, Plan
from dtgui.core.runs.records import MachineRecord, RunRecord
from dtgui.core.sweeps.sweep import JobReader, TrialJob
from dtgui.launch.drivers.base import Driver, Refused
from dtgui.launch.drivers.local import LocalDriver, local_executor, local_target
from dtgui.launch.drivers.slurm import (
    SlurmDriver,
    cluster_job_target,
    cluster_target,
    job_target,
)
from dtgui.launch.drivers.ssh import SshDriver, ssh_target
from dtgui.launch.exec.executor import Executor
from dtgui.launch.targets import Target

__all__ = ["DRIVERS", "Driver", "Refused", "bundle_targets", "chosen_targets",
           "cluster_job_target", "cluster_target", "driver_for", "export_job", "job_readers",
           "job_target", "local_executor", "local_target", "owner_of", "plan_targets",
           "register", "ssh_machines", "ssh_target", "started_lines", "target_of_record",
           "trial_job"]

DRIVERS: dict[str, Driver] = {}


def register(driver: Driver) -> None:
    DRIVERS[driver.kind] = driver


register(LocalDriver())
register(SshDriver())
register(SlurmDriver())


def driver_for(target: Target) -> Driver:
    """The driver of the target's kind (Refused for a kind no driver is registered for)."""
    try:
        return DRIVERS[target.kind]
    except KeyError:
        raise Refused(f"{target.name}: no driver for targets of kind {target.kind!r} "
                      f"(known: {', '.join(DRIVERS)})") from None


def owner_of(machine: Machine) -> Driver | None:
    """The driver of the kind a registered machine is (a Slurm cluster's login node), None
    for a machine tasks are placed on over SSH."""
    return next((d for d in DRIVERS.values() if d.owns(machine)), None)


def ssh_machines(machines: Sequence[Machine]) -> list[Machine]:
    """The registered machines tasks are placed on over SSH: those no kind owns."""
    return [m for m in machines if owner_of(m) is None]


def trial_job(plan: Plan, machine: Machine) -> TrialJob:
    """The job each trial of a sweep over `plan` is on a registered machine a kind owns
    (its driver's `trial_job`). Refused for a machine no kind owns, or defaults that make
    no job."""
    owner = owner_of(machine)
    if owner is None:
        raise Refused(f"{machine.name} takes a sweep's trials as processes, not as jobs")
    return owner.trial_job(plan, machine)


def job_readers() -> dict[str, JobReader]:
    """Each kind's reader of a sweep's trial job as sweep.json keeps it (`load_sweep`)."""
    return {kind: driver.job_from_dict for kind, driver in DRIVERS.items()}


def plan_targets(plan: Plan, machines: Mapping[str, Machine]) -> list[Target]:
    """The targets of a placed plan: its machines in task order, each with the interpreter
    and the GPUs chosen for it (the wizard's placement). `machines`: the registered
    machines by name (KeyError for one that is not)."""
    gpus: dict[str, list[int]] = {}
    for task in plan.tasks:  # the GPUs chosen per machine, in task order
        chosen = gpus.setdefault(task.machine_name, [])
        chosen.extend(g for g in task.gpus if g not in chosen)
    targets = []
    for name in plan.machine_names:
        python = plan.machine(name).python
        targets.append(local_target(python, tuple(gpus[name])) if name == LOCAL_MACHINE
                       else ssh_target(machines[name], python, tuple(gpus[name])))
    return targets


def chosen_targets(plan: Plan, machines: Mapping[str, Machine],
                   job: object | None = None) -> list[Target]:
    """The targets the wizard's choice makes: the target of the job its box for a kind made
    (a Slurm job: the cluster), else the placed plan's machines (`plan_targets`). Refused
    for a job no driver knows."""
    if job is None:
        return plan_targets(plan, machines)
    for driver in DRIVERS.values():
        target = driver.target_of_job(job, machines)
        if target is not None:
            return [target]
    raise Refused(f"no driver knows the job {job!r}")


def export_job(plan: Plan, destination: Path, job: object) -> tuple[Path, str]:
    """The bundle of `plan` as the job a wizard box made, written to `destination` by its
    kind's driver for a run without dtgui, and how to start it there. Refused for a job no
    driver knows."""
    for driver in DRIVERS.values():
        written = driver.export(plan, destination, job)
        if written is not None:
            return written[0].path, written[1]
    raise Refused(f"no driver knows the job {job!r}")


def _recorded_kind(rec: MachineRecord) -> str:
    """The kind of a recorded machine; a record without one (an older dtgui's) tells it by
    its fields (a Slurm job's id, this machine's name)."""
    if rec.kind:
        return rec.kind
    return SlurmDriver.kind if rec.job_id else LocalDriver.kind if rec.is_local \
        else SshDriver.kind


def target_of_record(rec: MachineRecord, registry: MachineRegistry | None = None) -> Target:
    """The target of a recorded run's machine (its registered settings when it is still
    registered, else those recorded at launch). Refused for a kind no driver is known for."""
    kind = _recorded_kind(rec)
    if kind not in DRIVERS:
        raise Refused(f"{rec.name}: no driver for targets of kind {kind!r}")
    return DRIVERS[kind].reattach(rec, registry)


def started_lines(record: RunRecord | None, executors: Sequence[Executor]) -> list[str]:
    """What a command line says once a recorded run's tasks started (its drivers')."""
    machines = record.machines if record is not None else []
    return [line for rec, executor in zip(machines, executors, strict=False)
            if (line := DRIVERS[_recorded_kind(rec)].started(executor))]


def bundle_targets(bundle: Bundle, registry: MachineRegistry | None = None) -> list[Target]:
    """The targets a rendered bundle runs on: those of the driver that knows the bundle as
    its own (a Slurm bundle's cluster), else this machine. Raises Refused."""
    for driver in DRIVERS.values():
        target = driver.bundle_target(bundle, registry)
        if target is not None:
            return [target]
    return [local_target()]
