"""The queue of a sweep's trials: K at a time on free slots, each launched through the one
launch pipeline, pruned from its live validation values (docs/sweeps.md).

`prepare_sweep(folder, spec, plan)` checks a new sweep and writes its folder (`sweep.json` and
its study), once; `SweepQueue.new(folder, spec, plan)` is that and the queue, and
`SweepQueue(folder, *load_sweep(folder, job_readers()))` the queue of a sweep prepared
before (its own process, `dtgui.launch.sweeps.sweep_process`; the drivers read its trial job). `queue.run()` asks the study for a trial whenever a
slot is free, makes its plan (`dtgui.core.sweeps.sweep.apply`), launches it with `launch_plan` and follows its
`RunController`: each new point of the objective's series (the run's curves, folded by
`dtgui.core.run_curves`) is reported to Optuna, and a trial its pruner gives up is stopped
through its controller and marked pruned (its bundle, with its curves, stays). A trial whose
launch or run fails is marked failed with its error line; the others go on.

A slot is a place for one trial (`dtgui.launch.gpus.free_slots`): one of K on this machine's CPU,
a machine, a group of free GPUs on this machine or the machines named, or one of K jobs in a
Slurm cluster's queue (each trial its own job; Slurm places it). A GPU slot is asked
again before each trial starts on it: a GPU another process took since is left to it, and the
trial waits until the slot is free again (said in the notes, which the study keeps for the
sweep view). The GPUs its running trials hold are kept in the sweeps' register
(`dtgui.launch.gpus.holds`), which the wizard's GPU picker and other sweeps read. A plan
placed on registered machines runs each trial on those machines. The study (SQLite in the
sweep's folder, or the sweep's storage URL) is the queue's state: a sweep opened again settles the trials that ended while
dtgui was away, follows again those still running, runs again the trials a stop ended (with
their values, before the sampler is asked for new ones: a new trial that continues the stopped
trial's run from its checkpoint, `dtgui.launch.start.resume`, or trains from step 0 when it has
none) and adds trials up to the asked number.

Everything blocks: run it on a thread of its own (or from the command line).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from dtgui.core.plans.placement import task_layout
from dtgui.core.plans.plan import Plan
from dtgui.core.run_curves import bundle_curves
from dtgui.core.runs.records import RunRecord, remember_sweep
from dtgui.core.runs.run_state import PRUNED_MESSAGE, RunState
from dtgui.core.sweeps.sweep import TRIALS_DIR, SweepError, SweepSpec, apply, check, save_sweep
from dtgui.core.sweeps.sweep_study import (
    BEST_STEP_ATTR,
    BEST_VALUE_ATTR,
    RERUN_ATTR,
    RESUMED_ATTR,
    STOPPED_ATTR,
    Points,
    TrialRow,
    best_of,
    objective_points,
    open_study,
    rows,
    suggest,
    trial_count,
    trial_value,
    write_csv,
)
from dtgui.launch.controller import LaunchError, RunController
from dtgui.launch.drivers import driver_for
from dtgui.launch.gpus.free_slots import GpuProber, Slot, active_run_plans, slots_for
from dtgui.launch.gpus.holds import HoldRegister
from dtgui.launch.start.pipeline import launch_plan, reattach
from dtgui.launch.start.resume import resume_refusal, resume_run
from dtgui.launch.trackers.hparams import write_hparams
from dtgui.launch.trackers.mlflow_runs import sweep_tracker

log = logging.getLogger(__name__)
POLL_SECONDS = 0.5
RECHECK_SECONDS = 30.0  # a GPU slot found taken is asked again after this long
NOTES_ATTR = "notes"  # the study's user attribute that keeps the queue's notes


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


def prepare_sweep(folder: Path, spec: SweepSpec, plan: Plan) -> optuna.Study:
    """Check a new sweep and write its folder: its study (an unreachable storage is said
    now) and `sweep.json`. The one check and the one write of a sweep's settings; its study.
    SweepError says every reason it cannot run."""
    problems = check(spec, plan)
    if problems:
        raise SweepError(problems)
    folder.mkdir(parents=True, exist_ok=True)
    study = open_study(spec, folder)
    save_sweep(folder, spec, plan)
    remember_sweep(folder)  # listed on the Runs page
    return study


@dataclass
class SweepQueue:
    folder: Path
    spec: SweepSpec
    plan: Plan
    slots: list[Slot] | None = None  # default: slots_for(plan, spec.parallel, notes)
    on_trial_end: TrialEnded | None = None
    launch: Callable[..., RunController] = launch_plan  # the one pipeline (tests: a stand-in)
    notes: list[str] = field(default_factory=list)
    # Why a slot cannot take a trial now ("" when it can); default: a GpuProber's, when a
    # slot has GPUs.
    busy: Callable[[Slot], str] | None = None
    on_note: Callable[[str], None] | None = None

    @classmethod
    def new(cls, folder: Path, spec: SweepSpec, plan: Plan, **kwargs: Any) -> SweepQueue:
        """The queue of a new sweep (or of one gone on with new counts): checked and written
        first (`prepare_sweep`)."""
        prepare_sweep(folder, spec, plan)
        return cls(folder, spec, plan, **kwargs)

    def __post_init__(self) -> None:
        """The queue of a prepared sweep (`prepare_sweep`: checked, its folder written)."""
        self.study = open_study(self.spec, self.folder)  # an unreachable storage: said now
        if self.slots is None:
            self.slots = slots_for(self.plan, self.spec.parallel, self.notes,
                                   machines=self.spec.trial_on, job=self.spec.job)
        self._prober: GpuProber | None = None
        if self.busy is None and any(s.gpus for s in self.slots):
            self._prober = GpuProber({t.name: t.machine for s in self.slots
                                      for t in s.targets if t.machine is not None},
                                     runs=lambda: active_run_plans(but_under=self.folder))
            self.busy = self._prober.busy
        # the GPUs its running trials hold, for single runs and other sweeps to leave alone
        self._holds = HoldRegister(self.plan.run_name) \
            if any(s.gpus for s in self.slots) else None
        self._said_busy: set[str] = set()  # slots said to be busy, until they are free
        self.study.set_user_attr(NOTES_ATTR, list(self.notes))
        # MLflow: the sweep's run, its trials' runs nested under it (None when not sent)
        self._mlflow = sweep_tracker(self.folder, self.plan.run_name, {
            "objective": self.spec.objective, "direction": self.spec.goal,
            "search": self.spec.search, "trials": str(self.spec.trials),
            **{f"param.{p.name}": p.space.text() for p in self.spec.params}})
        self._stop = threading.Event()
        self._running: dict[int, Running] = {}

    @property
    def trials_root(self) -> Path:
        return self.folder / TRIALS_DIR

    def request_stop(self) -> None:
        """Stop every running trial (each marked failed: stopped) and launch no more."""
        self._stop.set()

    # -- the loop ------------------------------------------------------------------------
    def say(self, note: str) -> None:
        """A note for the person (kept in the study for the sweep view)."""
        self.notes.append(note)
        self.study.set_user_attr(NOTES_ATTR, self.notes[-20:])
        if self.on_note is not None:
            self.on_note(note)

    def run(self) -> list[TrialRow]:
        """Run the sweep until its trials are done (or a stop is asked); every trial's row."""
        free = list(self.slots or ())
        self._resume(free)
        self._rerun_stopped()
        wanted = trial_count(self.spec)
        resting: list[tuple[float, Slot]] = []  # GPU slots another process took, and when
        try:
            self._loop(free, resting, wanted)
        finally:
            if self._prober is not None:
                self._prober.close()
            if self._holds is not None:
                self._holds.close()
        write_csv(self.folder, self.study, self.spec)
        if self._mlflow is not None:
            done = [t.value for t in self.study.get_trials(deepcopy=False, states=(
                TrialState.COMPLETE,)) if t.value is not None]
            best = (min if self.spec.goal == "minimize" else max)(done) if done else None
            self._mlflow.finish(best, failed=self._stop.is_set())
        return rows(self.study)

    def _loop(self, free: list[Slot], resting: list[tuple[float, Slot]], wanted: int) -> None:
        while True:
            if self._stop.is_set():
                for run in self._running.values():
                    run.controller.request_stop()
            else:
                now = time.time()
                free += [slot for when, slot in resting if when <= now]
                resting[:] = [(when, slot) for when, slot in resting if when > now]
                while free and self._started_count() < wanted:
                    slot = free.pop(0)
                    why = self.busy(slot) if self.busy is not None else ""
                    if why:
                        if slot.name not in self._said_busy:  # said once, not every check
                            self._said_busy.add(slot.name)
                            self.say(f"{slot.name}: {why}; the next trial waits for it "
                                     f"(asked again every {RECHECK_SECONDS:g} s).")
                        resting.append((time.time() + RECHECK_SECONDS, slot))
                        continue
                    if slot.name in self._said_busy:
                        self._said_busy.discard(slot.name)
                        self.say(f"{slot.name} is free again: a trial starts there.")
                    self._start(slot)
            waiting = bool(resting) and not self._stop.is_set() \
                and self._started_count() < wanted
            if not self._running and not waiting:
                break
            time.sleep(POLL_SECONDS)
            for number, run in list(self._running.items()):
                self._follow(run)
                if run.controller.finished:
                    del self._running[number]
                    if self._holds is not None:
                        self._holds.release(number)
                    self._settle(run)
                    free.append(run.slot)
            if self._stop.is_set() and not self._running:
                break

    def _started_count(self) -> int:
        """Trials started, but those stopped (their values run again: `_rerun_stopped`; an
        enqueued trial waits for a slot: it counts once asked)."""
        return sum(1 for t in self.study.get_trials(deepcopy=False, states=(
            TrialState.RUNNING, TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL))
            if not t.user_attrs.get(STOPPED_ATTR))

    def _rerun_stopped(self) -> None:
        """Each trial a stop ended (Stop sweep, Ctrl-C, its run stopped while the sweep was
        away) runs again with its values before the sampler is asked for new ones, once: as
        a new trial (the study's enqueued trials are asked first) that continues the stopped
        run from its checkpoint (`_continued`), else in a new run folder from step 0."""
        trials = self.study.get_trials(deepcopy=False)
        again = {t.user_attrs.get(RERUN_ATTR) for t in trials}
        for frozen in trials:
            if frozen.state is TrialState.FAIL and frozen.user_attrs.get(STOPPED_ATTR) \
                    and frozen.number not in again and frozen.params:
                self.study.enqueue_trial(frozen.params, user_attrs={RERUN_ATTR: frozen.number})
                self.say(f"trial {frozen.number} was stopped: it runs again with its values "
                         f"({', '.join(f'{k}={v}' for k, v in frozen.params.items())}).")

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
            controller = self._continued(trial, slot, assignments) or self.launch(
                plan, self.trials_root, targets=list(slot.targets), assignments=assignments,
                keep_ports=False)
        except (LaunchError, SweepError, OSError, ValueError) as exc:
            self._end(trial, TrialState.FAIL, error=_first_line(str(exc)))
            return
        trial.set_user_attr("bundle", str(controller.bundle.path))
        if controller.record is not None:
            trial.set_user_attr("run_id", controller.record.run_id)
        self._running[number] = Running(trial, slot, controller, started)
        self._nest(number, controller)
        self._hold(number, slot)

    def _nest(self, number: int, controller: RunController) -> None:
        if self._mlflow is not None:
            self._mlflow.trial_started(controller.tracker, number)

    def _continued(self, trial: optuna.Trial, slot: Slot,
                   assignments: dict[str, str] | None) -> RunController | None:
        """A re-run trial's stopped run resumed from its newest checkpoint on the slot (a
        plan placed on other machines: on its own machines), in the stopped trial's run
        folder; None when it has no checkpoint or cannot go on (said): the trial then trains
        from step 0 in a run folder of its own."""
        stopped = trial.user_attrs.get(RERUN_ATTR)
        if not isinstance(stopped, int):
            return None
        bundle = self.study.get_trials(deepcopy=False)[stopped].user_attrs.get("bundle")
        record = None
        with contextlib.suppress(OSError, ValueError):
            record = RunRecord.load(Path(str(bundle))) if bundle else None
        if record is None or resume_refusal(record):
            return None
        whole = bool(driver_for(slot.targets[0]).whole_run)  # a cluster places its tasks
        targets = list(slot.targets) if assignments is not None or whole else []
        try:
            controller = resume_run(record, targets=targets,
                                    assignments=None if whole else assignments)
        except (LaunchError, OSError, ValueError) as exc:
            self.say(f"trial {trial.number} runs trial {stopped}'s values from step 0: "
                     f"{_first_line(str(exc))}")
            return None
        from_step = record.segments[-1].from_step if record.segments else 0
        trial.set_user_attr(RESUMED_ATTR, from_step)
        self.say(f"trial {trial.number} continues trial {stopped}'s run from its checkpoint "
                 f"of step {from_step}.")
        return controller

    def _hold(self, number: int, slot: Slot) -> None:
        if self._holds is not None and slot.gpus:
            self._holds.hold(number, slot.targets[0].name, slot.gpus)

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
            run.controller.request_stop(PRUNED_MESSAGE)

    def _settle(self, run: Running) -> None:
        """The trial's end in the study, from its controller's."""
        controller = run.controller
        points = self._points(controller)
        if run.pruned:
            self._end(run.trial, TrialState.PRUNED, points=points)
        elif controller.state is RunState.FINISHED:
            self._finished(run.trial, points, controller.final_loss)
        else:
            stopped = self._stop.is_set() or controller.state is RunState.STOPPED
            why = "stopped" if self._stop.is_set() else controller.message
            self._end(run.trial, TrialState.FAIL, error=_first_line(why or str(
                controller.state)), stopped=stopped)
        self._record_trial(run)

    def _record_trial(self, run: Running) -> None:
        """The trial's values and objective beside its run: its HParams summary (the run's,
        written again with them) and its MLflow run."""
        frozen = self.study.get_trials(deepcopy=False)[run.trial.number]
        state = {TrialState.COMPLETE: "complete", TrialState.PRUNED: "pruned"}.get(
            frozen.state, "failed")
        values = {f"trial.{k}": v if isinstance(v, (str, bool)) else float(v)
                  for k, v in frozen.params.items() if isinstance(v, (str, bool, int, float))}
        value = trial_value(frozen)
        objective = {f"objective/{self.spec.objective}": value} if value is not None else {}
        controller = run.controller
        try:
            write_hparams(controller.bundle, controller.metrics, controller.state,
                          {**values, "trial.state": state}, objective)
        except (OSError, ValueError) as exc:
            log.warning("trial %d: could not write its HParams summary: %s", frozen.number, exc)
        if controller.tracker is not None:
            controller.tracker.log_trial(frozen.params, state, self.spec.objective, value)

    def _finished(self, trial: optuna.Trial, points: Points | None,
                  final_loss: float | None) -> None:
        if self.spec.objective == "loss" and final_loss is not None:
            self._end(trial, TrialState.COMPLETE, value=final_loss)
            return
        best = best_of(points, self.spec.goal) if points is not None else None
        if best is None:
            self._end(trial, TrialState.FAIL, error=f"the run reported no {self.spec.objective}")
            return
        trial.set_user_attr(BEST_STEP_ATTR, best[1])
        self._end(trial, TrialState.COMPLETE, value=best[0])

    def _end(self, trial: optuna.Trial, state: TrialState, *, value: float | None = None,
             error: str = "", points: Points | None = None, stopped: bool = False) -> None:
        trial.set_user_attr("ended", time.time())
        if error:
            trial.set_user_attr("error", error)
        if stopped:
            trial.set_user_attr(STOPPED_ATTR, True)
        if state is TrialState.PRUNED and points is not None:
            # its value is its best over all its run, as the Runs page shows it (trial_value)
            best = best_of(points, self.spec.goal)
            if best is not None:
                trial.set_user_attr(BEST_VALUE_ATTR, best[0])
                trial.set_user_attr(BEST_STEP_ATTR, best[1])
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
                    self._nest(frozen.number, controller)
                    self._hold(frozen.number, slot)
                    continue
            curves = bundle_curves(Path(str(bundle)))
            validation = {k: s.view() for k, s in curves.validation.items()}
            points = objective_points(self.spec.objective, validation,
                                      curves.scalars.snapshot())
            if record.state is RunState.FINISHED:
                self._finished(trial, points, curves.final_loss())
            else:
                self._end(trial, TrialState.FAIL, error=_first_line(
                    record.message or f"its run is {record.state.value}"),
                    stopped=record.state is RunState.STOPPED)


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else ""
