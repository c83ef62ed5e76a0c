"""Where a sweep's trials run: its slots (docs/sweeps.md, "Where trials run").

A slot is a place for one trial: one of K on this machine's CPU; a whole machine
(`--trial-on NAMES`); or a group of free GPUs (one a trial, or as many as the trial's strategy
takes) on this machine or on the machines `--trial-on` names. A GPU is free when no other
process uses it: little of its memory taken, little utilisation and no compute process on it
(the machine probe's figures, `dtgui.worker.machine_probe`), and not given to a run dtgui
started that still runs (the runs' records: a single run launched while the sweep runs holds
its GPUs from its start, before it loads anything onto them). The decisions (`idle`,
`held_gpus`, `free_groups`, `gpu_slots`) are pure; `GpuProber` asks the machine probe
(this machine with a subprocess, the others over SSH), and is asked again before each
trial starts on a GPU slot, so that a GPU another process took since is left to it and the
trial waits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dtgui.core.machines.hardware import GpuInfo
from dtgui.core.machines.registry import Machine, MachineRegistry, RemoteFacts
from dtgui.core.plans.plan import LOCAL_MACHINE, PLAN_NAME, Plan, is_local_machine
from dtgui.core.runs.records import RunHistory, RunRecord
from dtgui.core.sweeps.sweep import SweepError
from dtgui.core.target_job import TargetJob
from dtgui.launch.drivers import (
    Refused,
    chosen_targets,
    local_target,
    machine_target,
    plan_targets,
    process_machines,
)
from dtgui.launch.gpus.holds import Hold, busy_gpus, read_holds
from dtgui.launch.targets import Target
from dtgui.remote.commands import CommandRunner, CommandTimeout, LocalRunner, SshRunner
from dtgui.remote.connector import Connector
from dtgui.remote.hostkeys import ConnectError
from dtgui.remote.probe import ask, read_gpus

log = logging.getLogger(__name__)
BUSY_MEMORY = 0.10  # a GPU with more of its memory in use, or busier, is taken
BUSY_UTILISATION = 10.0


@dataclass(frozen=True)
class Slot:
    """Where one trial runs: the targets it may use (one GPU group, or K of this machine)."""

    name: str
    targets: tuple[Target, ...] = (local_target(),)

    @property
    def gpus(self) -> tuple[int, ...]:
        """The GPUs the slot holds (none for a CPU slot or a plan on other machines)."""
        return self.targets[0].gpus if len(self.targets) == 1 else ()


@dataclass
class GpuReport:
    """A machine's GPUs now: the probe's figures, and the GPUs in use by others: a compute
    process on them (the probe's count), given to a run, held by another sweep's trial."""

    gpus: list[GpuInfo] = field(default_factory=list)
    with_processes: set[int] = field(default_factory=set)
    error: str = ""
    held_by: dict[int, str] = field(default_factory=dict)  # GPU -> the run or trial given it

    def idle(self) -> list[int]:
        return idle(self.gpus, self.with_processes)


def local_slots(count: int) -> list[Slot]:
    return [Slot(f"local-{i + 1}") for i in range(count)]


def _registered(names: Sequence[str], registry: MachineRegistry | None) -> dict[str, Machine]:
    known = registry or MachineRegistry()
    found, unknown = {}, []
    for name in names:
        if is_local_machine(name):
            continue
        machine = known.find(name)
        if machine is None:
            unknown.append(name)
        else:
            found[name] = machine
    if unknown:
        raise SweepError([f"No machine named {', '.join(unknown)} is registered (known: "
                          f"{', '.join(known.names()) or 'none'}; local = this machine)."])
    return found


def _target(name: str, machines: Mapping[str, Machine], gpus: tuple[int, ...] = ()) -> Target:
    if is_local_machine(name):
        return local_target(gpus=gpus)
    return machine_target(machines[name], gpus=gpus)


EVERY_MACHINE = "all"  # --trial-on all: this machine and every registered one


def expand_names(names: Sequence[str], registry: MachineRegistry | None = None) -> list[str]:
    """The machine names with `all` standing for this machine and every registered machine
    that takes tasks among others (not one of a kind that takes a run whole, e.g. a
    cluster's login node: its jobs are not slots)."""
    if EVERY_MACHINE not in names:
        return list(names)
    known = registry or MachineRegistry()
    every = [LOCAL_MACHINE, *(m.name for m in process_machines(known.machines()))]
    return [n for name in names for n in (every if name == EVERY_MACHINE else [name])]


def job_slots(plan: Plan, job: TargetJob, parallel: int,
              registry: MachineRegistry | None = None) -> list[Slot]:
    """`parallel` slots on the target of `job` (its kind's driver makes it, e.g. a Slurm
    cluster at its login node): each trial is one job of its own there, placed by its
    scheduler; `parallel` is how many of the sweep's jobs are queued at once. SweepError
    says why the job has no target (e.g. its cluster is not registered)."""
    known = {m.name: m for m in (registry or MachineRegistry()).machines()}
    try:
        (target,) = chosen_targets(plan, known, job)
    except Refused as exc:
        raise SweepError([str(exc)]) from None
    return [Slot(f"{target.name} job #{i + 1}", (target,)) for i in range(max(1, parallel))]


def machine_slots(names: Sequence[str], registry: MachineRegistry | None = None) -> list[Slot]:
    """A slot a name: each trial runs whole on one machine ("local" = this one; a name
    given twice takes two trials at once; "all" = this one and every registered one).
    SweepError names an unknown machine."""
    names = expand_names(names, registry)
    machines = _registered(names, registry)
    return [Slot(f"{'local' if is_local_machine(n) else machines[n].name} #{i + 1}",
                 (_target(n, machines),)) for i, n in enumerate(names)]


# -- which GPUs are free (pure) ------------------------------------------------------------------
def idle(gpus: Sequence[GpuInfo], with_processes: Sequence[int] | set[int] = ()) -> list[int]:
    """The indexes of the GPUs no other process uses: no compute process on them (the
    probe's count, or `with_processes`), little of their memory taken, little utilisation."""
    return [g.index for g in gpus if g.index not in with_processes and not g.processes
            and g.mem_total and g.mem_used / g.mem_total < BUSY_MEMORY
            and g.util < BUSY_UTILISATION]


def free_groups(reports: Mapping[str, GpuReport],
                per_trial: int) -> list[tuple[str, tuple[int, ...]]]:
    """(machine, GPU group) for every group of `per_trial` free GPUs of one machine, the
    machines taken in turn (a first trial on each before a second on any)."""
    per_machine = []
    for name, report in reports.items():
        gpus = report.idle()
        step = max(1, per_trial)
        per_machine.append([(name, tuple(gpus[i:i + step]))
                            for i in range(0, len(gpus) - step + 1, step)])
    groups = []
    for i in range(max((len(g) for g in per_machine), default=0)):
        groups += [g[i] for g in per_machine if i < len(g)]
    return groups


def gpu_slots(gpus: Sequence[int], per_trial: int) -> list[Slot]:
    """Groups of `per_trial` free GPUs of this machine, one trial each."""
    report = GpuReport([GpuInfo(i, "", 1, 0, 0.0) for i in gpus])
    return [Slot(f"gpu {','.join(map(str, g))}", (local_target(gpus=g),))
            for _, g in free_groups({LOCAL_MACHINE: report}, per_trial)]


def per_trial_gpus(plan: Plan) -> int:
    """The GPUs one trial takes: its strategy's per task, for every compute task."""
    return max(1, plan.strategy.gpus_per_task(plan.replicas_per_task)) * plan.compute_tasks


ALL_GPUS = -1  # in `held_gpus`: every GPU of the machine (a GPU run not given a few)


def held_gpus(plans: Sequence[Plan]) -> dict[str, set[int]]:
    """Machine -> the GPUs these runs' tasks were given (ALL_GPUS for a GPU task given none:
    it sees every GPU of its machine)."""
    return {machine: set(gpus) for machine, gpus in gpu_holders(plans).items()}


def gpu_holders(plans: Sequence[Plan]) -> dict[str, dict[int, str]]:
    """Machine -> GPU (ALL_GPUS: every one) -> the run given it ("run NAME")."""
    held: dict[str, dict[int, str]] = {}
    for plan in plans:
        for task in plan.tasks:
            gpus = task.gpus or ((ALL_GPUS,) if plan.on_gpu else ())
            for gpu in gpus:
                held.setdefault(task.machine_name, {}).setdefault(gpu, f"run {plan.run_name}")
    return held


def holds_machines(record: RunRecord) -> bool:
    """Whether an active record's run still holds its machines: the one check of whether a
    run's processes still exist (`dtgui.launch.start.run_check`; a run none of whose tasks is
    left is recorded as lost and holds nothing; one on a machine reached over SSH, not asked
    here, holds its machines)."""
    from dtgui.launch.start.run_check import Liveness, settle

    return record.is_active and settle(record, reach=False).verdict is not Liveness.GONE


def active_run_plans(records: Sequence[RunRecord] | None = None,
                     but_under: Path | None = None) -> list[Plan]:
    """The placed plans of the runs dtgui started that still run, however they were started
    (`RunHistory.live`: the runs directory's, a `dtgui run` bundle's, a sweep's trials, a
    resumed run's); not those under `but_under` (a sweep's own trials: its slots)."""
    plans = []
    for record in [r for r in RunHistory().live() if holds_machines(r)] if records is None \
            else records:
        if but_under is not None and Path(record.bundle).absolute().is_relative_to(
                but_under.absolute()):
            continue
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            plans.append(Plan.load(str(Path(record.bundle) / PLAN_NAME)))
    return plans


def _hold(report: GpuReport, held: Mapping[int, str]) -> GpuReport:
    """The report with the GPUs runs and trials hold counted as in use (and by whom)."""
    by = {g.index: held[ALL_GPUS] for g in report.gpus} if ALL_GPUS in held else {}
    by.update({gpu: who for gpu, who in held.items() if gpu != ALL_GPUS})
    return GpuReport(report.gpus, report.with_processes | set(by), report.error, by)


# -- asking the machines -----------------------------------------------------------------------
class GpuProber:
    """Each machine's GPUs now, from the machine probe: this machine's with a subprocess, a
    registered machine's over SSH (one connection a machine, kept for the sweep). Blocks: not
    on a UI thread."""

    def __init__(self, machines: Mapping[str, Machine] | None = None,
                 runs: Callable[[], list[Plan]] = active_run_plans,
                 sweeps: Callable[[], list[Hold]] | None = None) -> None:
        """`runs`: the placed plans of the other runs that hold GPUs now; `sweeps`: the GPUs
        other sweeps' trials hold now (default: the sweeps' register, but this process's)."""
        self.machines = dict(machines or {})
        self.runs = runs
        self.sweeps = sweeps or (lambda: read_holds(but_pid=os.getpid()))
        self._clients: dict[str, SshRunner] = {}

    def _runner(self, name: str) -> CommandRunner:
        if is_local_machine(name):
            return LocalRunner()
        if name not in self._clients:
            self._clients[name] = SshRunner(Connector()(self.machines[name]))
        return self._clients[name]

    def report(self, name: str) -> GpuReport:
        """The machine's GPUs now, those dtgui's other runs and other sweeps' trials hold
        counted as in use."""
        report = self._ask(name)
        key = LOCAL_MACHINE if is_local_machine(name) else name
        held = {**gpu_holders(self.runs()).get(key, {}),
                **busy_gpus(self.sweeps()).get(key, {})}
        return _hold(report, held) if held else report

    def _ask(self, name: str) -> GpuReport:
        machine = self.machines.get(name)
        python = (machine.python if machine is not None else "") or (
            sys.executable if is_local_machine(name) else "python3")
        try:
            runner = self._runner(name)
            answer = ask(runner, python, ["facts", "--gpus"])
            facts = RemoteFacts()
            if answer.data is not None and "gpus" in answer.data:
                read_gpus(facts, answer.data["gpus"])
            return GpuReport(facts.gpus, {g.index for g in facts.gpus if g.processes},
                             error=facts.gpu_error or answer.detail)
        except (ConnectError, CommandTimeout, OSError) as exc:
            self._clients.pop(name, None)
            return GpuReport(error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    def busy(self, slot: Slot) -> str:
        """Why the slot cannot take a trial now ("" when every GPU of it is free, and for a
        slot without GPUs)."""
        return self.taken(slot.targets[0].name, slot.gpus) if slot.gpus else ""

    def taken(self, machine: str, gpus: Sequence[int] | None,
              report: GpuReport | None = None) -> str:
        """Why these GPUs of `machine` (None: every one it has) cannot be given to a run now,
        naming who has them ("" when all are free). `report`: the machine's, asked just
        now."""
        report = report or self.report(machine)
        if report.error and not report.gpus:
            return f"its machine's GPUs cannot be read ({report.error})"
        free = set(report.idle())
        wanted = [g.index for g in report.gpus] if gpus is None else list(gpus)
        taken = [g for g in wanted if g not in free]
        if not taken:
            return ""
        who = sorted({report.held_by.get(g, "another process") for g in taken})
        where = "" if is_local_machine(machine) else f" of {machine}"
        return f"GPU {', '.join(map(str, taken))}{where} is in use by {' and '.join(who)}"

    def close(self) -> None:
        for runner in self._clients.values():
            with contextlib.suppress(Exception):
                runner.client.close()
        self._clients.clear()


Reports = Callable[[Sequence[str]], dict[str, GpuReport]]


def free_gpus() -> list[int]:
    """This machine's idle GPUs, from the one machine probe."""
    return GpuProber().report(LOCAL_MACHINE).idle()


def slots_for(plan: Plan, parallel: int, notes: list[str],
              gpus: Callable[[], list[int]] = free_gpus, machines: Sequence[str] = (),
              reports: Reports | None = None,
              registry: MachineRegistry | None = None,
              job: TargetJob | None = None) -> list[Slot]:
    """The slots of a sweep over `plan`. With `job` (a kind's, e.g. a Slurm job),
    `parallel` jobs on its target (`job_slots`); its
    machines when it is placed on others; with
    `machines` (--trial-on), a trial a machine, or for a GPU plan a trial per free GPU group
    of those machines; free GPU groups of this machine for a GPU plan; else `parallel` of
    this machine. More trials at once than free devices: said in `notes`, and they wait."""
    if job is not None:
        return job_slots(plan, job, parallel, registry)
    if machines:
        if not plan.on_gpu:
            return machine_slots(machines, registry)[:max(1, parallel)]
        return machine_gpu_slots(machines, plan, parallel, notes, reports, registry)
    if plan.tasks and any(not t.is_local for t in plan.tasks):
        known = {m.name: m for m in (registry or MachineRegistry()).machines()}
        targets = tuple(plan_targets(plan, known))
        return [Slot(f"{'+'.join(t.name for t in targets)} #{i + 1}", targets)
                for i in range(parallel)]
    if not plan.on_gpu:
        return local_slots(parallel)
    per_trial = per_trial_gpus(plan)
    slots = gpu_slots(gpus(), per_trial)
    return _enough(slots, parallel, per_trial, "this machine", notes)


def machine_gpu_slots(names: Sequence[str], plan: Plan, parallel: int, notes: list[str],
                      reports: Reports | None = None,
                      registry: MachineRegistry | None = None) -> list[Slot]:
    """A trial per free GPU group across the machines named (each name once)."""
    unique = list(dict.fromkeys(expand_names(names, registry)))
    machines = _registered(unique, registry)
    if reports is None:
        prober = GpuProber(machines)
        found = {n: prober.report(n) for n in unique}
        prober.close()
    else:
        found = reports(unique)
    for name, report in found.items():
        if report.error and not report.gpus:
            notes.append(f"{name}: its GPUs cannot be read ({report.error}); no trial runs "
                         "there.")
        elif report.with_processes:
            taken = ", ".join(map(str, sorted(report.with_processes)))
            notes.append(f"{name}: GPU {taken} run(s) another process; left to it.")
    per_trial = per_trial_gpus(plan)
    slots = [Slot(f"{'local' if is_local_machine(n) else n} gpu {','.join(map(str, g))}",
                  (_target(n, machines, g),)) for n, g in free_groups(found, per_trial)]
    return _enough(slots, parallel, per_trial, ", ".join(unique), notes)


def _enough(slots: list[Slot], parallel: int, per_trial: int, where: str,
            notes: list[str]) -> list[Slot]:
    if not slots:
        raise SweepError([f"No GPU of {where} is free (every one is in use by another "
                          "process): free one, or sweep on the CPU."])
    if len(slots) < parallel:
        notes.append(f"{parallel} trials at once were asked, but {len(slots)} group(s) of "
                     f"{per_trial} free GPU(s) are on {where}: the other trials wait for one.")
    return slots[:parallel]
