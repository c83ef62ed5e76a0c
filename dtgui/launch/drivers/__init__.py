"""The kinds of target a run can use, one driver each, and the targets they make.

`DRIVERS` maps a kind to its driver (`dtgui.launch.drivers.base.Driver`), made once from
every kind registered in the entry-point group `dtgui.targets` (`dtgui.kinds`): a driver
that fails to load, or lacks a hook every driver needs, is reported by its kind's name and
left out. The launch pipeline, the reattach, `dtgui run`, sweep slots and the wizard reach
targets through here: `driver_for(target)`, `target_of_record`, `bundle_targets`, and the
constructors (`local_target`, `plan_targets`, `chosen_targets`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.machines.registry import PLAIN_KIND, Machine, MachineRegistry
from dtgui.core.plans.plan import LOCAL_MACHINE, Plan
from dtgui.core.runs.records import MachineRecord, RunRecord
from dtgui.core.sweeps.sweep import JobReader
from dtgui.core.target_job import TargetJob
from dtgui.kinds import hooks, problems, report_plugin
from dtgui.launch.drivers.base import REQUIRED_HOOKS, Driver, Refused
from dtgui.launch.exec.executor import Executor
from dtgui.launch.targets import LOCAL_KIND, Target, local_target

__all__ = ["DRIVERS", "Driver", "Refused", "bundle_job", "bundle_targets", "chosen_targets",
           "connected_machines", "driver_for", "export_job", "job_readers", "local_executor",
           "local_target", "machine_target", "owner_of", "plan_targets", "plugin_problems", "process_machines",
           "recorded_kind", "register", "run_errors", "started_lines", "target_of_record",
           "trial_job"]

class _Drivers(MutableMapping[str, Driver]):
    """The drivers by kind, made on first use: a kind's driver module imports this package
    (its base), so the kinds are loaded once every driver module can be imported whole."""

    def __init__(self) -> None:
        self.found: dict[str, Driver] = {}
        self.loaded = False

    def _load(self) -> dict[str, Driver]:
        if not self.loaded:
            self.loaded = True
            _register_kinds(self.found)
        return self.found

    def __getitem__(self, kind: str) -> Driver:
        return self._load()[kind]

    def __setitem__(self, kind: str, driver: Driver) -> None:
        self.found[kind] = driver

    def __delitem__(self, kind: str) -> None:
        del self.found[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())


DRIVERS = _Drivers()


def register(driver: Driver) -> None:
    DRIVERS[driver.kind] = driver


def _register_kinds(drivers: dict[str, Driver]) -> None:
    """Every registered kind's driver, made once; one that cannot be is reported by its
    kind's name, and the others work."""
    for name, found in hooks("driver").items():
        try:
            driver = found()
        except Exception as exc:  # noqa: BLE001 - any plugin's failure is reported by name
            report_plugin(name, f"its driver could not be made ({type(exc).__name__}: {exc})")
            continue
        if not isinstance(driver, Driver) or driver.kind != name:
            report_plugin(name, f"its driver is no dtgui Driver of the kind {name!r}")
            continue
        missing = [h for h in REQUIRED_HOOKS
                   if getattr(type(driver), h) is getattr(Driver, h)]
        if missing:
            report_plugin(name, f"its driver lacks the hook {', '.join(map(repr, missing))}")
            continue
        drivers.setdefault(driver.kind, driver)  # one a test registered first stays


def plugin_problems() -> list[str]:
    """Why target plugins are not available, by name, once every kind's driver was made
    (`dtgui.kinds.problems`; the app shows them at start, the command line on stderr)."""
    len(DRIVERS)  # every kind's driver made (or reported)
    return problems()


def local_executor(bundle: Bundle, python: str) -> Executor:
    """The executor of a bundle's tasks on this machine."""
    return DRIVERS[LOCAL_KIND].executor(local_target(python), bundle, str(bundle.path))


def run_errors() -> tuple[type[Exception], ...]:
    """The errors of every kind that a command line reports as a refusal (its message)."""
    return tuple(e for d in DRIVERS.values() for e in d.errors)


def driver_for(target: Target) -> Driver:
    """The driver of the target's kind (Refused for a kind no driver is registered for)."""
    try:
        return DRIVERS[target.kind]
    except KeyError:
        raise Refused(f"{target.name}: no driver for targets of kind {target.kind!r} "
                      f"(known: {', '.join(DRIVERS)})") from None


def owner_of(machine: Machine) -> Driver | None:
    """The driver of the kind a registered machine is when the machine is that kind's own
    target (a cluster's login node), None for a machine tasks are placed on among others
    (or of a kind that is not installed)."""
    driver = DRIVERS.get(machine.kind)
    return driver if driver is not None and not driver.takes_tasks else None


def process_machines(machines: Sequence[Machine]) -> list[Machine]:
    """The registered machines tasks are placed on, among others: those of a kind whose
    runs share machines."""
    return [m for m in machines
            if (d := DRIVERS.get(m.kind)) is not None and d.takes_tasks]


def trial_job(plan: Plan, machine: Machine) -> TargetJob:
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
                       else machine_target(machines[name], python, tuple(gpus[name])))
    return targets


def machine_target(machine: Machine, python: str | None = None,
                   gpus: tuple[int, ...] = ()) -> Target:
    """A registered machine as one target among a run's machines (its kind's driver makes
    it). Refused for a machine of a kind that is not installed or takes a run whole."""
    driver = DRIVERS.get(machine.kind)
    if driver is None or not driver.takes_tasks:
        raise Refused(f"{machine.name} takes no tasks among other machines")
    return driver.machine_target(machine, python, gpus)


def chosen_targets(plan: Plan, machines: Mapping[str, Machine],
                   job: TargetJob | None = None) -> list[Target]:
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


def export_job(plan: Plan, destination: Path, job: TargetJob) -> tuple[Path, str]:
    """The bundle of `plan` as the job a wizard box made, written to `destination` by its
    kind's driver for a run without dtgui, and how to start it there. Refused for a job no
    driver knows."""
    for driver in DRIVERS.values():
        written = driver.export(plan, destination, job)
        if written is not None:
            return written[0].path, written[1]
    raise Refused(f"no driver knows the job {job!r}")


def recorded_kind(rec: MachineRecord) -> str:
    """The kind of a recorded machine; a record without one (an older dtgui's) is told by
    its fields by the first driver that knows it as its own (`old_record`), else it is this
    machine or a registered one (by its name)."""
    if rec.kind:
        return rec.kind
    found = next((d.kind for d in DRIVERS.values() if d.old_record(rec)), "")
    return found or (LOCAL_KIND if rec.is_local else PLAIN_KIND)


def target_of_record(rec: MachineRecord, registry: MachineRegistry | None = None) -> Target:
    """The target of a recorded run's machine (its registered settings when it is still
    registered, else those recorded at launch). Refused for a kind no driver is known for."""
    kind = recorded_kind(rec)
    if kind not in DRIVERS:
        raise Refused(f"{rec.name}: no driver for targets of kind {kind!r}")
    return DRIVERS[kind].reattach(rec, registry)


def connected_machines(record: RunRecord,
                       registry: MachineRegistry | None = None) -> list[Machine]:
    """The machines a recorded run's targets are reached at over a connection (their
    registered settings when still registered): those a reattach or a resume connects
    first. Refused for a kind no driver is known for."""
    targets = [target_of_record(rec, registry) for rec in record.machines]
    return [t.machine for t in targets if t.needs_connection and t.machine is not None]


def started_lines(record: RunRecord | None, executors: Sequence[Executor]) -> list[str]:
    """What a command line says once a recorded run's tasks started (its drivers')."""
    machines = record.machines if record is not None else []
    return [line for rec, executor in zip(machines, executors, strict=False)
            if (line := DRIVERS[recorded_kind(rec)].started(executor))]


def bundle_targets(bundle: Bundle, registry: MachineRegistry | None = None) -> list[Target]:
    """The targets a rendered bundle runs on: those of the driver that knows the bundle as
    its own (a Slurm bundle's cluster), else this machine. Raises Refused."""
    for driver in DRIVERS.values():
        target = driver.bundle_target(bundle, registry)
        if target is not None:
            return [target]
    return [local_target()]


def bundle_job(path: Path) -> TargetJob | None:
    """The job a bundle was rendered as, read by the driver that knows it as its own (None
    for a bundle of processes)."""
    return next((job for d in DRIVERS.values() if (job := d.bundle_job(path)) is not None),
                None)
