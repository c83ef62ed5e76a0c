"""A sweep's Optuna study: its storage, sampler and pruner, the objective read from a run's
curves, and the table of its trials (docs/sweeps.md).

The study is the one record of a sweep's trials: their parameters, state, objective value and
what dtgui adds as user attributes (the run's bundle, machine, times, error line, best step).
Its storage is SQLite in the sweep's folder unless the sweep names an Optuna storage URL
(PostgreSQL, MySQL ...); a URL that cannot be reached is a `SweepError` at once.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from dtgui.core.run_tasks import task_key
from dtgui.core.sweeps.sweep import Param, SpaceKind, SweepError, SweepSpec, Value

STUDY_FILE = "study.db"
STUDY_NAME = "sweep"
TRIALS_CSV = "trials.csv"
RERUN_ATTR = "rerun_of"  # a trial's user attribute: the stopped trial whose values it runs
RESUMED_ATTR = "resumed_from_step"  # a re-run trial's: it continues that trial's run from
# the checkpoint of this step (in its run folder; without it the trial trained from step 0)
STOPPED_ATTR = "stopped"  # a trial's user attribute: it was stopped (not failed, not pruned)
BEST_VALUE_ATTR = "best_value"  # a pruned trial's: its objective's best value over its run
BEST_STEP_ATTR = "best_step"  # the step of that value
CONNECT_SECONDS = 10  # a server URL that does not answer in this time is unreachable

optuna.logging.set_verbosity(optuna.logging.WARNING)  # dtgui says what each trial did

# What dtgui calls a trial's end; Optuna's state for it (a stopped trial is Optuna's FAIL
# with STOPPED_ATTR: `trial_state`).
TRIAL_STATES = {TrialState.COMPLETE: "finished", TrialState.PRUNED: "pruned",
                TrialState.FAIL: "failed", TrialState.RUNNING: "running",
                TrialState.WAITING: "waiting"}


def trial_state(trial: FrozenTrial) -> str:
    """The trial's state named by its cause: finished, pruned (its pruner stopped it),
    stopped (the user stopped the sweep or its run), failed, running or waiting."""
    if trial.state is TrialState.FAIL and trial.user_attrs.get(STOPPED_ATTR):
        return "stopped"
    return TRIAL_STATES.get(trial.state, trial.state.name.lower())


def trial_value(trial: FrozenTrial) -> float | None:
    """The trial's objective, the one value every view shows of it (sweep view, CLI, CSV,
    MLflow, HParams): a finished trial's value, a pruned trial's best value over all its run
    (Optuna keeps the last value told its pruner, which may be steps before the run stopped),
    None for the others."""
    if trial.state is TrialState.PRUNED:
        best = trial.user_attrs.get(BEST_VALUE_ATTR)
        return float(best) if isinstance(best, (int, float)) else trial.value
    return trial.value if trial.state is TrialState.COMPLETE else None


def storage_url(spec: SweepSpec, folder: Path) -> str:
    return spec.storage or f"sqlite:///{(folder / STUDY_FILE).resolve()}"


def shown_url(url: str) -> str:
    """The URL without its password (for messages)."""
    return re.sub(r"(//[^:/@]+:)[^@]*@", r"\1***@", url)


def open_storage(url: str, *, create: bool = True) -> optuna.storages.RDBStorage:
    """Optuna's storage at `url`, connected; SweepError when it cannot be reached. `create`:
    make its tables when they are not there (a reader leaves that to the sweep)."""
    engine: dict[str, Any] = {}
    if url.startswith(("postgresql", "mysql")):  # no answer: an error, not a long wait
        engine["connect_args"] = {"connect_timeout": CONNECT_SECONDS}
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=engine,
                                          skip_table_creation=not create)
    except Exception as exc:  # every driver has its own errors
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SweepError([f"The study storage {shown_url(url)} cannot be reached: {reason}"]) \
            from exc


class QueueGridSampler(optuna.samplers.GridSampler):
    """Optuna's grid, told trials by the queue rather than by `study.optimize`: the queue
    stops at the grid's size itself (`trial_count`), so the grid's own `study.stop()` when
    its last point is told (allowed only inside `optimize`) is not called."""

    def after_trial(self, study: optuna.Study, trial: FrozenTrial,
                    state: TrialState, values: Sequence[float] | None) -> None:
        return None


def sampler(spec: SweepSpec) -> optuna.samplers.BaseSampler:
    if spec.search == "grid":
        grid: dict[str, Sequence[Any]] = {p.name: p.space.grid() or [] for p in spec.params}
        return QueueGridSampler(grid, seed=spec.seed)
    if spec.search == "random":
        return optuna.samplers.RandomSampler(seed=spec.seed)
    # trials run in parallel: those still running count as their worst (constant liar), so
    # that TPE does not propose the same point to every free slot
    return optuna.samplers.TPESampler(seed=spec.seed, constant_liar=True)


def pruner(spec: SweepSpec) -> optuna.pruners.BasePruner:
    if spec.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)
    if spec.pruner == "halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    return optuna.pruners.NopPruner()


def open_study(spec: SweepSpec, folder: Path) -> optuna.Study:
    """The sweep's study (made the first time, loaded again on a resume)."""
    storage = open_storage(storage_url(spec, folder))
    try:
        return optuna.create_study(storage=storage, study_name=STUDY_NAME,
                                   direction="maximize" if spec.goal == "maximize" else "minimize", sampler=sampler(spec),
                                   pruner=pruner(spec), load_if_exists=True)
    except ValueError as exc:  # e.g. the stored study's direction differs
        raise SweepError([f"The study in {shown_url(storage.url)} cannot be used: {exc}"]) \
            from exc


def trial_count(spec: SweepSpec) -> int:
    """The trials the sweep runs: as asked, at most every point of a grid."""
    return min(spec.trials, spec.grid_size()) if spec.search == "grid" else spec.trials


def suggest(trial: optuna.Trial, params: Sequence[Param]) -> dict[str, Value]:
    """A trial's values, asked of its sampler."""
    out: dict[str, Value] = {}
    for p in params:
        space = p.space
        if space.kind is SpaceKind.CHOICE or isinstance(trial.study.sampler,
                                                        optuna.samplers.GridSampler):
            choices = space.grid() or []
            chosen = trial.suggest_categorical(p.name, choices)
            out[p.name] = chosen if chosen is not None else choices[0]
        elif space.kind.is_int:
            out[p.name] = trial.suggest_int(p.name, int(space.low), int(space.high),
                                            log=space.kind.is_log)
        else:
            out[p.name] = trial.suggest_float(p.name, space.low, space.high,
                                              log=space.kind.is_log)
    return out


# -- the objective ---------------------------------------------------------------------------
Points = tuple[np.ndarray, np.ndarray]


def objective_points(objective: str, validation: Mapping[str, Points],
                     scalars: Mapping[str, Mapping[str, Points]]) -> Points | None:
    """The (steps, values) the objective is read from: `val_loss` / `val_X` = the validation
    loss / metric X, else a validation metric or a reported scalar of that name (the main
    task's). None while the run has reported none of it."""
    name = objective.removeprefix("val_") if objective.startswith("val_") else objective
    for key in (name, objective):
        if key in validation and len(validation[key][0]):
            return validation[key]
    for tag in (objective, f"val/{name}", f"validation/{name}"):
        by_task = scalars.get(tag)
        if by_task:
            task = min(by_task, key=task_key)
            if len(by_task[task][0]):
                return by_task[task]
    return None


def best_of(points: Points, goal: str) -> tuple[float, int] | None:
    """(best value, its step) in the goal's direction; None without a finite value."""
    steps, values = (np.asarray(a, dtype=np.float64) for a in points)
    finite = np.isfinite(values)
    if not finite.any():
        return None
    masked = np.where(finite, values, np.inf if goal == "minimize" else -np.inf)
    i = int(np.argmin(masked) if goal == "minimize" else np.argmax(masked))
    return float(values[i]), int(steps[i])


# -- the table of trials ---------------------------------------------------------------------
@dataclass(frozen=True)
class TrialRow:
    """One trial as the command line, the CSV and the sweep view show it."""

    number: int
    state: str  # finished | pruned | stopped | failed | running | waiting (`trial_state`)
    params: dict[str, Any]
    objective: float | None
    best_step: int | None
    seconds: float | None
    machine: str
    run: str  # the run's bundle directory
    error: str
    started: float | None
    ended: float | None
    last_step: int | None = None  # the step of the last value reported to the pruner
    last_value: float | None = None  # that value
    continued_in: int | None = None  # a stopped trial: the trial whose run continues its run
    step: int | None = None  # a running trial: the step its run has reached (`read_sweep`)
    total_steps: int = 0  # and the steps it trains to (0: not known)

    @property
    def state_text(self) -> str:
        """Its state as the sweep view says it: a running trial with its progress."""
        if self.state != "running" or self.step is None:
            return self.state
        of = f" of {self.total_steps:,}" if self.total_steps else ""
        return f"running · step {self.step:,}{of}"

    @property
    def error_text(self) -> str:
        """The error as the table says it, with the trial that continues a stopped run."""
        if self.continued_in is None:
            return self.error
        return f"{self.error}; its run continues in trial {self.continued_in}"

    @classmethod
    def of(cls, trial: FrozenTrial) -> TrialRow:
        attrs = trial.user_attrs
        started, ended = attrs.get("started"), attrs.get("ended")
        best_step = attrs.get(BEST_STEP_ATTR)
        reported = trial.intermediate_values
        last = max(reported) if reported else None
        return cls(trial.number, trial_state(trial), dict(trial.params), trial_value(trial),
                   int(best_step) if isinstance(best_step, int) else None,
                   ended - started if isinstance(started, float) and isinstance(ended, float)
                   else None,
                   str(attrs.get("machine", "")), str(attrs.get("bundle", "")),
                   str(attrs.get("error", "")),
                   started if isinstance(started, float) else None,
                   ended if isinstance(ended, float) else None,
                   last, float(reported[last]) if last is not None else None)

    def text(self, objective: str) -> str:
        """One line for the command line."""
        values = "  ".join(f"{k}={_short(v)}" for k, v in self.params.items())
        told = f"{objective} {self.objective:.4g}" if self.objective is not None else ""
        if self.best_step is not None and told:
            told += f" (step {self.best_step})"
        time = f"{self.seconds:.0f} s" if self.seconds is not None else ""
        parts = [f"trial {self.number}", self.state, values, told, time,
                 self.error_text if self.state in ("failed", "stopped") else ""]
        return "  ".join(p for p in parts if p)


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def rows(study: optuna.Study) -> list[TrialRow]:
    """Every trial's row; a stopped trial whose run a re-run trial continued names it (a
    finished trial's attributes cannot change: the re-run trial holds the link)."""
    trials = study.get_trials(deepcopy=False)
    continued = {t.user_attrs.get(RERUN_ATTR): t.number for t in trials
                 if RESUMED_ATTR in t.user_attrs}
    return [replace(TrialRow.of(t), continued_in=continued.get(t.number)) for t in trials]


def sorted_rows(rows_: Iterable[TrialRow], goal: str) -> list[TrialRow]:
    """Finished trials by their objective, best first (the first is the study's best), then
    pruned ones (by their best value before they were stopped), then the others by number."""
    sign = 1.0 if goal == "minimize" else -1.0
    rank = {"finished": 0, "pruned": 1}
    return sorted(rows_, key=lambda r: (rank.get(r.state, 2) if r.objective is not None else 2,
                                        sign * r.objective if r.objective is not None else 0.0,
                                        r.number))


def csv_text(rows_: Sequence[TrialRow], params: Sequence[Param], objective: str) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    names = [p.name for p in params]
    writer.writerow(["trial", "state", objective, "best_step", *names, "seconds", "machine",
                     "run", "error"])
    for r in rows_:
        writer.writerow([r.number, r.state, "" if r.objective is None else repr(r.objective),
                         "" if r.best_step is None else r.best_step,
                         *(r.params.get(n, "") for n in names),
                         "" if r.seconds is None else f"{r.seconds:.1f}", r.machine, r.run,
                         r.error_text])
    return out.getvalue()


def write_csv(folder: Path, study: optuna.Study, spec: SweepSpec) -> Path:
    path = folder / TRIALS_CSV
    tmp = path.with_suffix(".csv.tmp")
    tmp.write_text(csv_text(sorted_rows(rows(study), spec.goal), spec.params, spec.objective),
                   encoding="utf-8")
    tmp.replace(path)
    return path


# -- reading a sweep back (the sweep view) ---------------------------------------------------
@dataclass(frozen=True)
class SweepTable:
    """A sweep as its view shows it: its settings and its trials, best first."""

    folder: Path
    spec: SweepSpec
    rows: list[TrialRow]
    notes: list[str] = field(default_factory=list)  # what the queue said (a GPU taken ...)

    @property
    def best(self) -> TrialRow | None:
        first = self.rows[0] if self.rows else None
        return first if first is not None and first.state == "finished" else None


def read_sweep(folder: Path) -> SweepTable:
    """The sweep in `folder` (blocks on the disk or the storage: off the UI thread).
    SweepError when it holds none or its study cannot be read."""
    from dtgui.core.sweeps.sweep import load_sweep

    spec, _plan = load_sweep(folder)
    url = storage_url(spec, folder)
    if not spec.storage and not (folder / STUDY_FILE).is_file():
        raise SweepError([f"{folder} holds no study yet."])
    storage = open_storage(url, create=False)
    try:
        study = optuna.load_study(study_name=STUDY_NAME, storage=storage)
    except KeyError as exc:
        raise SweepError([f"{folder} holds no study yet."]) from exc
    notes = [str(n) for n in study.user_attrs.get("notes") or []]
    return SweepTable(folder, spec, sorted_rows(map(with_progress, rows(study)), spec.goal),
                      notes)


def with_progress(row: TrialRow) -> TrialRow:
    """A running trial with the step its run has reached, read from the end of its events."""
    from dtgui.core.runs.run_index import planned, steps_so_far

    if row.state != "running" or not row.run:
        return row
    return replace(row, step=steps_so_far(row.run), total_steps=planned(row.run)[0])


def axis_values(rows_: Sequence[TrialRow], param: Param) -> list[float | None]:
    """Each trial's value of `param` as a number to plot: the value, or a choice's index
    among its choices for names (None when the trial has none)."""
    choices = list(param.space.values)
    out: list[float | None] = []
    for r in rows_:
        value = r.params.get(param.name)
        if value is None:
            out.append(None)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(float(value))
        else:
            out.append(float(choices.index(value)) if value in choices else None)
    return out


def parallel_coordinates(rows_: Sequence[TrialRow],
                         params: Sequence[Param]) -> tuple[list[str], list[list[float | None]]]:
    """Axes (each parameter, then the objective) and each trial's position on them, 0..1
    (log-scale parameters on a log scale); None where a trial has no value."""
    columns: list[list[float | None]] = []
    for p in params:
        values = axis_values(rows_, p)
        if p.space.kind.is_log:
            values = [float(np.log10(v)) if v is not None and v > 0 else None for v in values]
        columns.append(values)
    columns.append([r.objective for r in rows_])
    scaled = []
    for values in columns:
        known = [v for v in values if v is not None and np.isfinite(v)]
        low, high = (min(known), max(known)) if known else (0.0, 1.0)
        span = high - low or 1.0
        scaled.append([None if v is None or not np.isfinite(v) else (v - low) / span
                       for v in values])
    lines = [[column[i] for column in scaled] for i in range(len(rows_))]
    return [*(p.name for p in params), "objective"], lines


def axis_ends(rows_: Sequence[TrialRow], params: Sequence[Param]) -> list[tuple[str, str]]:
    """What 0 and 1 are on each parallel-coordinates axis (`parallel_coordinates`): its
    lowest and highest value among the trials, as text ("" when no trial has one)."""
    ends = []
    for p in params:
        known = [v for v in axis_values(rows_, p) if v is not None]
        names = [r.params.get(p.name) for r in rows_ if isinstance(r.params.get(p.name), str)]
        if not known:
            ends.append(("", ""))
        elif names:  # names are placed by their index among the choices
            ends.append((str(p.space.values[int(min(known))]),
                         str(p.space.values[int(max(known))])))
        else:
            ends.append((f"{min(known):.4g}", f"{max(known):.4g}"))
    objectives = [r.objective for r in rows_ if r.objective is not None
                  and np.isfinite(r.objective)]
    ends.append((f"{min(objectives):.4g}", f"{max(objectives):.4g}") if objectives else ("", ""))
    return ends
