"""The queue of a sweep's trials: K at a time on free slots, each launched through the one
launch pipeline, pruned from its live validation values (docs/sweeps.md).

`SweepQueue(folder, spec, plan).run()` asks the study for a trial whenever a slot is free,
makes its plan (`dtgui.core.sweep.apply`), launches it with `launch_plan` and follows its
`RunController`: each new point of the objective's series (the run's curves, folded by
`dtgui.core.run_curves`) is reported to Optuna, and a trial its pruner gives up is stopped
through its controller and marked pruned (its bundle, with its curves, stays). A trial whose
launch or run fails is marked failed with its error line; the others go on.

A slot is a place for one trial: on this machine without GPUs, one of K; with GPUs, a group of
free GPUs (one a trial, or as many as its strategy takes), a GPU that another process uses
being busy (the machine probe's memory and utilisation). A plan placed on registered machines
runs each trial on those machines. The study (SQLite in the sweep's folder, or the sweep's
storage URL) is the queue's state: a sweep opened again settles the trials that ended while
dtgui was away, follows again those still running, and adds trials up to the asked number.

Everything blocks: run it on a thread of its own (or from the command line).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import TrialState

from dtgui.core.cluster import task_layout
from dtgui.core.hardware import GpuInfo
from dtgui.core.machines import MachineRegistry
from dtgui.core.plan import Plan, is_local_machine
from dtgui.core.run_curves import bundle_curves
from dtgui.core.run_state import RunState
from dtgui.core.runs import RunRecord
from dtgui.core.sweep import SweepError, SweepSpec, apply, check, save_sweep
from dtgui.core.sweep_study import (
    Points,
    TrialRow,
    best_of,
    objective_points,
    open_study,
    suggest,
    trial_count,
    write_csv,
)
from dtgui.launch.controller import LaunchError, RunController
from dtgui.launch.pipeline import launch_plan, reattach
from dtgui.launch.targets import Target, plan_targets

log = logging.getLogger(__name__)
POLL_SECONDS = 0.5
TRIALS_DIR = "trials"  # the trials' bundles, in the sweep's folder
BUSY_MEMORY = 0.10  # a GPU with more of its memory in use, or busier, is taken
BUSY_UTILISATION = 10.0


@dataclass(frozen=True)
class Slot:
    """Where one trial runs: the targets it may use (one GPU group, or K of this machine)."""

    name: str
    targets: tuple[Target, ...] = (Target(),)


def local_slots(count: int) -> list[Slot]:
    return [Slot(f"local-{i + 1}") for i in range(count)]


def machine_slots(names: Sequence[str], registry: MachineRegistry | None = None) -> list[Slot]:
    """A slot a name: each trial runs whole on one machine ("local" = this one; a name
    given twice takes two trials at once). SweepError names an unknown machine."""
    known = registry or MachineRegistry()
    slots, unknown = [], []
    for i, name in enumerate(names):
        if is_local_machine(name):
            slots.append(Slot(f"local #{i + 1}"))
            continue
        machine = known.find(name)
        if machine is None:
            unknown.append(name)
        else:
            slots.append(Slot(f"{machine.name} #{i + 1}",
                              (Target(machine.name, machine, machine.python),)))
    if unknown:
        raise SweepError([f"No machine named {', '.join(unknown)} is registered (known: "
                          f"{', '.join(known.names()) or 'none'}; local = this machine)."])
    return slots


def idle(gpus: Sequence[GpuInfo]) -> list[int]:
    """The indexes of the GPUs no other process uses: little of their memory taken, little
    utilisation."""
    return [g.index for g in gpus if g.mem_total and g.mem_used / g.mem_total < BUSY_MEMORY
            and g.util < BUSY_UTILISATION]


def free_gpus(python: str = "") -> list[int]:
    """This machine's idle GPUs, from the one machine probe."""
    import sys

    from dtgui.core.machines import RemoteFacts
    from dtgui.remote.commands import LocalRunner
    from dtgui.remote.probe import ask, read_gpus

    answer = ask(LocalRunner(), python or sys.executable, ["facts", "--gpus"])
    facts = RemoteFacts()
    if answer.data is not None and "gpus" in answer.data:
        read_gpus(facts, answer.data["gpus"])
    return idle(facts.gpus)


def gpu_slots(gpus: Sequence[int], per_trial: int) -> list[Slot]:
    """Groups of `per_trial` free GPUs of this machine, one trial each."""
    groups = [tuple(gpus[i:i + per_trial]) for i in range(0, len(gpus) - per_trial + 1,
                                                           max(1, per_trial))]
    return [Slot(f"gpu {','.join(map(str, g))}", (Target(gpus=g),)) for g in groups]


def slots_for(plan: Plan, parallel: int, notes: list[str],
              gpus: Callable[[], list[int]] = free_gpus) -> list[Slot]:
    """The slots of a sweep over `plan`: its machines when it is placed on others; free GPU
    groups of this machine for a GPU plan; else `parallel` of this machine. More trials at
    once than free devices: said in `notes`, and they wait."""
    if plan.tasks and any(not t.is_local for t in plan.tasks):
        registry = {m.name: m for m in MachineRegistry().machines()}
        targets = tuple(plan_targets(plan, registry))
        return [Slot(f"{'+'.join(t.name for t in targets)} #{i + 1}", targets)
                for i in range(parallel)]
    if not plan.on_gpu:
        return local_slots(parallel)
    per_trial = max(1, plan.strategy.gpus_per_task(plan.replicas_per_task)) \
        * plan.compute_tasks
    slots = gpu_slots(gpus(), per_trial)
    if len(slots) < parallel:
        notes.append(f"{parallel} trials at once were asked, but {len(slots)} group(s) of "
                     f"{per_trial} free GPU(s) are here: the others wait for one.")
    if not slots:
        raise SweepError(["No GPU of this machine is free (every one is in use by another "
                          "process): free one, or sweep on the CPU."])
    return slots[:parallel]


@dataclass
class Running:
    """A trial being followed."""

    trial: optuna.Trial
    slot: Slot
    controller: RunController
    started: float
    reported: float = float("-inf")  # the last step reported to the pruner
    pruned: bool = False


TrialEnded = Callable[[TrialRow], None]


@dataclass
class SweepQueue:
    folder: Path
    spec: SweepSpec
    plan: Plan
    slots: list[Slot] | None = None  # default: slots_for(plan, spec.parallel, notes)
    on_trial_end: TrialEnded | None = None
    launch: Callable[..., RunController] = launch_plan  # the one pipeline (tests: a stand-in)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        problems = check(self.spec, self.plan)
        if problems:
            raise SweepError(problems)
        if not self.spec.storage:  # SQLite in the folder
            self.folder.mkdir(parents=True, exist_ok=True)
        self.study = open_study(self.spec, self.folder)  # an unreachable storage: said now
        if self.slots is None:
            self.slots = slots_for(self.plan, self.spec.parallel, self.notes)
        save_sweep(self.folder, self.spec, self.plan)
        self._stop = threading.Event()
        self._running: dict[int, Running] = {}

    @property
    def trials_root(self) -> Path:
        return self.folder / TRIALS_DIR

    def request_stop(self) -> None:
        """Stop every running trial (each marked failed: stopped) and launch no more."""
        self._stop.set()

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> list[TrialRow]:
        """Run the sweep until its trials are done (or a stop is asked); every trial's row."""
        free = list(self.slots or ())
        self._resume(free)
        wanted = trial_count(self.spec)
        while True:
            if self._stop.is_set():
                for run in self._running.values():
                    run.controller.request_stop()
            else:
                while free and self._started_count() < wanted:
                    self._start(free.pop(0))
            if not self._running:
                break
            time.sleep(POLL_SECONDS)
            for number, run in list(self._running.items()):
                self._follow(run)
                if run.controller.finished:
                    del self._running[number]
                    self._settle(run)
                    free.append(run.slot)
            if self._stop.is_set() and not self._running:
                break
        write_csv(self.folder, self.study, self.spec)
        return [TrialRow.of(t) for t in self.study.get_trials(deepcopy=False)]

    def _started_count(self) -> int:
        """Trials started (an enqueued one waits for a slot: it counts once asked)."""
        return len(self.study.get_trials(deepcopy=False, states=(
            TrialState.RUNNING, TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)))

    def _start(self, slot: Slot) -> None:
        trial = self.study.ask()
        number = trial.number
        values = suggest(trial, self.spec.params)
        plan = apply(self.plan, values, self.spec.params).with_changes(
            run_name=f"{self.plan.run_name}-t{number:03d}")
        assignments = None  # a plan placed on other machines: its placement
        if all(t.is_local for t in plan.tasks):  # placed here or not yet: on the slot's machine
            plan = plan.with_changes(tasks=(), cluster={})
            name = slot.targets[0].name
            assignments = {f"{kind}:{index}": name for kind, index in task_layout(plan)}
        trial.set_user_attr("machine", slot.name)
        started = time.time()
        trial.set_user_attr("started", started)
        try:
            controller = self.launch(plan, self.trials_root, targets=list(slot.targets),
                                     assignments=assignments, keep_ports=False)
        except (LaunchError, SweepError, OSError, ValueError) as exc:
            self._end(trial, TrialState.FAIL, error=_first_line(str(exc)))
            return
        trial.set_user_attr("bundle", str(controller.bundle.path))
        if controller.record is not None:
            trial.set_user_attr("run_id", controller.record.run_id)
        self._running[number] = Running(trial, slot, controller, started)

    def _points(self, controller: RunController) -> Points | None:
        snap = controller.metrics.snapshot()
        return objective_points(self.spec.objective, snap.validation,
                                controller.metrics.scalars.snapshot())

    def _follow(self, run: Running) -> None:
        """Report the objective's new points; stop the trial when the pruner says so."""
        if run.pruned:
            return
        points = self._points(run.controller)
        if points is None:
            return
        steps, values = points
        for step, value in zip(steps.tolist(), values.tolist(), strict=True):
            if step > run.reported and value == value:  # NaN is not reported
                run.trial.report(float(value), int(step))
                run.reported = float(step)
        last = run.controller.plan.steps  # trained to the end: nothing left to save
        if float("-inf") < run.reported < last and not run.controller.finished \
                and run.trial.should_prune():
            run.pruned = True
            run.controller.request_stop()

    def _settle(self, run: Running) -> None:
        """The trial's end in the study, from its controller's."""
        controller = run.controller
        points = self._points(controller)
        if run.pruned:
            self._end(run.trial, TrialState.PRUNED, points=points)
        elif controller.state is RunState.FINISHED:
            self._finished(run.trial, points, controller.final_loss)
        else:
            why = "stopped" if self._stop.is_set() else controller.message
            self._end(run.trial, TrialState.FAIL, error=_first_line(why or str(
                controller.state)))

    def _finished(self, trial: optuna.Trial, points: Points | None, final_loss: float | None) -> None:
        if self.spec.objective == "loss" and final_loss is not None:
            self._end(trial, TrialState.COMPLETE, value=final_loss)
            return
        best = best_of(points, self.spec.goal) if points is not None else None
        if best is None:
            self._end(trial, TrialState.FAIL, error=f"the run reported no {self.spec.objective}")
            return
        trial.set_user_attr("best_step", best[1])
        self._end(trial, TrialState.COMPLETE, value=best[0])

    def _end(self, trial: optuna.Trial, state: TrialState, *, value: float | None = None,
             error: str = "", points: Points | None = None) -> None:
        trial.set_user_attr("ended", time.time())
        if error:
            trial.set_user_attr("error", error)
        if state is TrialState.PRUNED and points is not None:
            best = best_of(points, self.spec.goal)
            if best is not None:
                trial.set_user_attr("best_step", best[1])
        self.study.tell(trial, value, state=state)
        write_csv(self.folder, self.study, self.spec)
        if self.on_trial_end is not None:
            frozen = self.study.get_trials(deepcopy=False)[trial.number]
            self.on_trial_end(TrialRow.of(frozen))

    # -- a sweep opened again --------------------------------------------------------------
    def _resume(self, free: list[Slot]) -> None:
        """Trials the study holds as running (dtgui stopped while they ran): settled from
        their bundle when they ended, followed again when they still run."""
        for frozen in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            trial = optuna.Trial(self.study, frozen._trial_id)
            bundle = frozen.user_attrs.get("bundle")
            record = None
            with contextlib.suppress(OSError, ValueError):
                record = RunRecord.load(Path(str(bundle))) if bundle else None
            if record is None:
                self._end(trial, TrialState.FAIL, error="dtgui stopped before its run started")
                continue
            if record.state.active and free:
                try:
                    controller = reattach(record)
                except (LaunchError, OSError, ValueError) as exc:
                    log.warning("trial %d cannot be followed again: %s", frozen.number, exc)
                else:
                    slot = free.pop(0)
                    trial.set_user_attr("machine", slot.name)
                    started = frozen.user_attrs.get("started", time.time())
                    self._running[frozen.number] = Running(trial, slot, controller,
                                                           float(started))
                    continue
            curves = bundle_curves(Path(str(bundle)))
            validation = {k: s.view() for k, s in curves.validation.items()}
            points = objective_points(self.spec.objective, validation,
                                      curves.scalars.snapshot())
            if record.state is RunState.FINISHED:
                self._finished(trial, points, curves.final_loss())
            else:
                self._end(trial, TrialState.FAIL, error=_first_line(
                    record.message or f"its run is {record.state.value}"))


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else ""
