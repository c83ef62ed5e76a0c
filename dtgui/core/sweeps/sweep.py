"""A sweep: one run setup trained many times with some of its settings varied (docs/sweeps.md).

A `SweepSpec` names the parameters that vary, each with its `Space` (a list of values, or a
uniform / log-uniform range of ints or floats), the search (grid, random, TPE), the number of
trials, how many run at once, the objective and its direction, and the pruner. `Param`s reach
a run in one of three ways (`ParamTarget`): a field of the plan (learning rate, batch size,
optimizer, weight decay, schedule, warm-up, clip norm ... or the `DTGUI_*` variable a script
reads it from), a variable of the user's own script (`env:NAME`), or an argument of that script.
`apply(plan, values)` makes a trial's plan. Everything here is pure: parsing and validation
say what is wrong in sentences (`SweepError`); the Optuna study is `dtgui.core.sweeps.sweep_study`.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dtgui.core.curve_values import lower_is_better
from dtgui.core.plans.plan import Plan, validate
from dtgui.core.scripts.script import ScriptModel
from dtgui.core.target_job import TargetJob

SWEEP_FILE = "sweep.json"  # the sweep's settings and base plan, in its folder
TRIALS_DIR = "trials"  # the trials' bundles, in the sweep's folder
SWEEP_SCHEMA = 1
SEARCHES = ("tpe", "random", "grid")
PRUNERS = ("median", "halving", "none")
DIRECTIONS = ("minimize", "maximize")
DEFAULT_OBJECTIVE = "val_loss"


class SweepError(ValueError):
    """A sweep that cannot run; the message says what to change."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__(" ".join(problems))
        self.problems = list(problems)


# A kind's reader of its job's fields as sweep.json keeps them (ValueError or TypeError when
# they make no job); the launch layer passes one per kind (`dtgui.launch.drivers.job_readers`).
JobReader = Callable[[dict[str, Any]], TargetJob]


@dataclass(frozen=True)
class StoredJob:
    """A trial job as sweep.json keeps it, read without its kind's reader (by what only
    shows or exports a sweep): saved again as it was read."""

    kind: str
    fields: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.fields)


class SpaceKind(str, enum.Enum):
    CHOICE = "choice"  # one of a list of values
    UNIFORM = "uniform"  # a float range
    LOGUNIFORM = "loguniform"  # a float range, searched on a log scale
    INT = "int"  # an int range
    LOGINT = "logint"  # an int range on a log scale

    @property
    def is_range(self) -> bool:
        return self is not SpaceKind.CHOICE

    @property
    def is_log(self) -> bool:
        return self in (SpaceKind.LOGUNIFORM, SpaceKind.LOGINT)

    @property
    def is_int(self) -> bool:
        return self in (SpaceKind.INT, SpaceKind.LOGINT)


Value = int | float | str


@dataclass(frozen=True)
class Space:
    """The values a parameter may take: `values` for a choice, `low`..`high` for a range."""

    kind: SpaceKind
    values: tuple[Value, ...] = ()
    low: float = 0.0
    high: float = 0.0

    def grid(self) -> list[Value] | None:
        """Every value, for a grid search (None for a float range: it has no list)."""
        if self.kind is SpaceKind.CHOICE:
            return list(self.values)
        if self.kind.is_int:
            return list(range(int(self.low), int(self.high) + 1))
        return None

    def extremes(self) -> list[Value]:
        """The values that validation tries: every choice, or both ends of the range."""
        if self.kind is SpaceKind.CHOICE:
            return list(self.values)
        if self.kind.is_int:
            return [int(self.low), int(self.high)]
        return [self.low, self.high]

    def text(self) -> str:
        if self.kind is SpaceKind.CHOICE:
            return "choice:" + ",".join(str(v) for v in self.values)
        low, high = (int(self.low), int(self.high)) if self.kind.is_int else (self.low,
                                                                                self.high)
        return f"{self.kind.value}:{low:g}:{high:g}"


class ParamTarget(str, enum.Enum):
    PLAN = "plan"  # a field of the plan
    ENV = "env"  # an environment variable of the user's own script (not one of dtgui's)
    ARG = "arg"  # an argument of the user's own script


# What a parameter may be called -> the plan field it sets. The `DTGUI_*` names are the
# variables a script task reads those fields from (dtgui.core.scripts.script_bundle).
PLAN_FIELDS: dict[str, str] = {
    "lr": "learning_rate", "learning-rate": "learning_rate",
    "DTGUI_LEARNING_RATE": "learning_rate",
    "batch-size": "per_replica_batch", "batch": "per_replica_batch",
    "DTGUI_PER_REPLICA_BATCH": "per_replica_batch",
    "optimizer": "optimizer", "weight-decay": "weight_decay", "momentum": "momentum",
    "schedule": "lr_schedule", "lr-schedule": "lr_schedule",
    "warmup": "warmup_steps", "warm-up": "warmup_steps", "warmup-steps": "warmup_steps",
    "lr-step-every": "lr_step_every", "lr-step-factor": "lr_step_factor",
    "clip-norm": "clip_norm", "grad-accumulation": "grad_accumulation",
    "steps": "steps", "DTGUI_STEPS": "steps",
    "steps-per-epoch": "steps_per_epoch", "DTGUI_STEPS_PER_EPOCH": "steps_per_epoch",
    "seed": "seed", "DTGUI_SEED": "seed",
    "precision": "precision", "DTGUI_PRECISION": "precision",
    "checkpoint-every": "checkpoint_every", "DTGUI_CHECKPOINT_EVERY": "checkpoint_every",
}
# The plan fields a user's own script is told (as DTGUI_* variables); it reads no others.
SCRIPT_SEES = frozenset({"learning_rate", "per_replica_batch", "steps", "steps_per_epoch",
                         "seed", "precision", "checkpoint_every"})
_FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(Plan)}
_NAME = re.compile(r"(env:[A-Za-z_][A-Za-z0-9_]*|arg:-?-?[A-Za-z0-9][\w.-]*|"
                   r"DTGUI_[A-Z0-9_]+|--?[A-Za-z0-9][\w.-]*|[a-z][a-z0-9-]*)")


@dataclass(frozen=True)
class Param:
    """One varied parameter: its name as the user wrote it, where it goes, its space."""

    name: str
    target: ParamTarget
    key: str  # the plan field, the variable, or the script's option (e.g. "--dropout")
    space: Space

    @property
    def kind(self) -> str:
        """"int", "float" or "str": how a value is read and given to the run."""
        if self.target is ParamTarget.PLAN:
            return {"int": "int", "float": "float"}.get(str(_FIELD_TYPES[self.key]), "str")
        if self.space.kind.is_range:
            return "int" if self.space.kind.is_int else "float"
        return "str"

    def to_text(self) -> str:
        return f"{self.name}={self.space.text()}"


def _finite_number(text: str, name: str, problems: list[str]) -> float | None:
    try:
        value = float(text)
    except ValueError:
        problems.append(f"{name}: {text!r} is not a number.")
        return None
    if not math.isfinite(value):
        problems.append(f"{name}: {text!r} is not a finite number.")
        return None
    return value


def _param_target(name: str) -> tuple[ParamTarget, str] | None:
    if name in PLAN_FIELDS:
        return ParamTarget.PLAN, PLAN_FIELDS[name]
    if name.replace("_", "-") in PLAN_FIELDS:
        return ParamTarget.PLAN, PLAN_FIELDS[name.replace("_", "-")]
    if name.startswith("env:") and not name[4:].startswith("DTGUI_"):
        return ParamTarget.ENV, name[4:]
    if name.startswith("-"):
        return ParamTarget.ARG, name
    if name.startswith("arg:") and len(name) > 4:
        return ParamTarget.ARG, name[4:]
    return None


def parse_param(text: str) -> Param:
    """`NAME=KIND:...` as the command line takes it: `lr=loguniform:1e-4:1e-1`,
    `batch-size=choice:16,32,64`, `warmup=int:0:100`, `DTGUI_LEARNING_RATE=...` (a value
    dtgui sets from a setting), `--depth=choice:2,4` (a script argument),
    `env:DROPOUT=uniform:0:0.5` (a variable of the script). Raises SweepError saying what is
    wrong."""
    name, eq, spec = text.partition("=")
    name = name.strip()
    if not eq or not name or not spec.strip():
        raise SweepError([f"--param {text!r}: write NAME=SPACE, e.g. lr=loguniform:1e-4:1e-1 "
                          "or batch-size=choice:16,32,64."])
    target = _param_target(name) if _NAME.fullmatch(name) else None
    if target is None:
        if name.removeprefix("env:").startswith("DTGUI_"):
            told = ", ".join(n for n in PLAN_FIELDS if n.startswith("DTGUI_"))
            raise SweepError([f"--param {name}: dtgui sets this variable itself; the DTGUI_* "
                              f"values a sweep can vary are {told}."])
        known = ", ".join(sorted(n for n in PLAN_FIELDS if not n.startswith("DTGUI_")))
        raise SweepError([f"--param {name}: not a parameter dtgui can vary. Use one of {known}, "
                          "a DTGUI_* value dtgui sets from them, a script option such as "
                          "--dropout, or env:NAME for a variable of your script."])
    kind_text, _, rest = spec.strip().partition(":")
    try:
        kind = SpaceKind(kind_text.strip().lower())
    except ValueError:
        raise SweepError([f"--param {name}: unknown space {kind_text!r}; use one of "
                          + ", ".join(k.value for k in SpaceKind) + "."]) from None
    problems: list[str] = []
    if kind is SpaceKind.CHOICE:
        values = [v.strip() for v in rest.split(",")]
        if not rest.strip() or any(not v for v in values):
            raise SweepError([f"--param {name}: the list of values is empty (choice:A,B,C)."])
        space = Space(kind, values=tuple(values))
    else:
        parts = rest.split(":")
        if len(parts) != 2:
            raise SweepError([f"--param {name}: a range is {kind.value}:LOW:HIGH."])
        low, high = (_finite_number(p.strip(), name, problems) for p in parts)
        if low is None or high is None:
            raise SweepError(problems)
        space = Space(kind, low=low, high=high)
    return typed(Param(name, target[0], target[1], space))


def typed(param: Param) -> Param:
    """The parameter with its values read as the kind it takes; SweepError when they are not
    of that kind, or the range is empty, inverted or not positive on a log scale."""
    space, name, kind = param.space, param.name, param.kind
    problems: list[str] = []
    if space.kind is SpaceKind.CHOICE:
        values: list[Value] = []
        for v in space.values:
            text = str(v)
            if kind == "int":
                number = _finite_number(text, name, problems)
                if number is not None and number != int(number):
                    problems.append(f"{name}: {text!r} is not a whole number.")
                elif number is not None:
                    values.append(int(number))
            elif kind == "float":
                number = _finite_number(text, name, problems)
                if number is not None:
                    values.append(number)
            else:
                values.append(text)
        if len(set(values)) != len(values):
            problems.append(f"{name}: a value is listed twice.")
        if problems:
            raise SweepError(problems)
        return dataclasses.replace(param, space=Space(space.kind, values=tuple(values)))
    if kind == "str":
        raise SweepError([f"{name} takes names, not numbers: give a list (choice:A,B)."])
    if kind == "int" and not space.kind.is_int:
        raise SweepError([f"{name} is a whole number: use int:LOW:HIGH or "
                          "logint:LOW:HIGH (or a list)."])
    if space.kind.is_int and (space.low != int(space.low) or space.high != int(space.high)):
        problems.append(f"{name}: an int range needs whole numbers ({space.text()}).")
    if space.low == space.high:
        problems.append(f"{name}: the range {space.low:g}..{space.high:g} is empty (LOW must "
                        "be below HIGH; for one value use choice:VALUE).")
    elif space.low > space.high:
        problems.append(f"{name}: the range {space.low:g}..{space.high:g} is inverted (LOW must "
                        "be below HIGH).")
    if space.kind.is_log and space.low <= 0:
        problems.append(f"{name}: a log-scale range must be above 0 ({space.low:g}).")
    if problems:
        raise SweepError(problems)
    return param


def new_sweep_folder(run_name: str, under: Path | None = None) -> Path:
    """A folder for a new sweep of the run setup `run_name`, holding no sweep yet: under the
    sweeps folder by default, named after the setup (numbered when taken)."""
    from dtgui.core.settings import sweeps_dir

    root = under if under is not None else sweeps_dir()
    base = f"{run_name or 'run'}-sweep"
    folder, n = root / base, 1
    while folder.exists():
        n += 1
        folder = root / f"{base}-{n}"
    return folder


def default_pruner(search: str) -> str:
    """The pruner a sweep gets when none is chosen: none for a grid (the user listed every
    value to see each one trained to the end; a median cut after two trials would stop
    values still improving), the median pruner for a search."""
    return "none" if search == "grid" else "median"


@dataclass(frozen=True)
class SweepSpec:
    """What a sweep varies and how it searches (its base plan is kept beside it)."""

    params: tuple[Param, ...]
    trials: int = 10
    parallel: int = 1
    search: str = "tpe"
    objective: str = DEFAULT_OBJECTIVE
    direction: str = ""  # "" = the objective's own sense (accuracy is maximised)
    pruner: str = "median"
    storage: str = ""  # "" = SQLite in the sweep's folder; else an Optuna storage URL
    seed: int = 0
    trial_on: tuple[str, ...] = ()  # each trial whole on one of these machines (--trial-on)
    job: TargetJob | None = None  # each trial one such job (its target: its kind's driver's)

    @property
    def goal(self) -> str:
        """The direction: given, or the objective's sense."""
        if self.direction:
            return self.direction
        return "minimize" if lower_is_better(self.objective) else "maximize"

    def grid_size(self) -> int:
        sizes = [len(p.space.grid() or ()) for p in self.params]
        return math.prod(sizes) if sizes else 0

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SWEEP_SCHEMA, "params": [p.to_text() for p in self.params],
                "trials": self.trials, "parallel": self.parallel, "search": self.search,
                "objective": self.objective, "direction": self.direction,
                "pruner": self.pruner, "storage": self.storage, "seed": self.seed,
                "trial_on": list(self.trial_on),
                "job": {"kind": self.job.kind, **self.job.to_dict()}
                if self.job is not None else None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any],
                  jobs: Mapping[str, JobReader] | None = None) -> SweepSpec:
        """The spec of a sweep.json's "spec"; `jobs`: the reader of each kind's trial job
        (None: the job is kept as stored, `StoredJob`)."""
        if data.get("schema") != SWEEP_SCHEMA:
            raise SweepError([f"sweep schema {data.get('schema')!r} is not {SWEEP_SCHEMA}."])
        # sweep.json files written before these fields had their own keys kept them in "extra"
        old = data.get("extra") or {}
        trial_on = data.get("trial_on", old.get("trial_on")) or ()
        return cls(params=tuple(parse_param(p) for p in data.get("params", ())),
                   trials=int(data.get("trials", 10)), parallel=int(data.get("parallel", 1)),
                   search=str(data.get("search", "tpe")),
                   objective=str(data.get("objective", DEFAULT_OBJECTIVE)),
                   direction=str(data.get("direction", "")),
                   pruner=str(data.get("pruner", "median")),
                   storage=str(data.get("storage", "")), seed=int(data.get("seed", 0)),
                   trial_on=tuple(str(n) for n in trial_on),
                   job=_sweep_job(_stored_job(data, old), jobs))


# An older dtgui kept the one kind of trial job it had under that kind's name (at the top
# level, or earlier in "extra"); its fields are the job's.
_OLD_JOB_KIND = "slurm"


def _stored_job(data: Mapping[str, Any], old: Mapping[str, Any]) -> object:
    """The trial job's entry of a sweep.json's spec, as {"kind": ..., **fields}."""
    if "job" in data:
        return data["job"]
    stored = data.get(_OLD_JOB_KIND, old.get(_OLD_JOB_KIND))
    if isinstance(stored, Mapping):
        return {**stored, "kind": _OLD_JOB_KIND}
    return stored


def _sweep_job(data: object, jobs: Mapping[str, JobReader] | None) -> TargetJob | None:
    """The trial job of a sweep.json (None when its trials are not jobs)."""
    if not data:
        return None
    try:
        if not isinstance(data, Mapping):
            raise TypeError(f"{type(data).__name__}, not an object")
        fields = {k: v for k, v in data.items() if k != "kind"}
        kind = str(data.get("kind", ""))
        if jobs is None:
            return StoredJob(kind, fields)
        if kind not in jobs:
            raise ValueError(f"no kind of target {kind!r} takes jobs here")
        return jobs[kind](fields)
    except (TypeError, ValueError) as exc:
        raise SweepError([f"The sweep's trial job cannot be read ({exc}): start the sweep "
                          "again in a new folder."]) from exc


def check(spec: SweepSpec, plan: Plan) -> list[str]:
    """Every reason the sweep cannot run over `plan`, as sentences."""
    problems: list[str] = []
    if not spec.params:
        problems.append("Name at least one parameter to vary (--param NAME=SPACE).")
    if spec.trials < 1:
        problems.append("The number of trials must be at least 1.")
    if spec.parallel < 1:
        problems.append("The number of trials at once must be at least 1.")
    if spec.search not in SEARCHES:
        problems.append(f"Search {spec.search!r}: use one of {', '.join(SEARCHES)}.")
    if spec.pruner not in PRUNERS:
        problems.append(f"Pruner {spec.pruner!r}: use one of {', '.join(PRUNERS)}.")
    if spec.direction and spec.direction not in DIRECTIONS:
        problems.append(f"Direction {spec.direction!r}: use minimize or maximize.")
    if not spec.objective.strip():
        problems.append("Name the objective (val_loss, val_accuracy, loss or a scalar).")
    names = [p.name for p in spec.params]
    keys = [(p.target, p.key) for p in spec.params]
    if len(set(keys)) != len(keys):
        problems.append(f"A parameter is named twice ({', '.join(names)}).")
    if spec.search == "grid":
        floats = [p.name for p in spec.params if p.space.grid() is None]
        if floats:
            problems.append(f"A grid search needs a list of values (or an int range) for "
                            f"{', '.join(floats)}.")
    script = plan.script
    for p in spec.params:
        if p.target is not ParamTarget.PLAN and script is None:
            problems.append(f"{p.name}: only your own training script takes "
                            f"{'variables' if p.target is ParamTarget.ENV else 'arguments'}; "
                            f"the {plan.model_kind} model cannot take it.")
        elif p.target is ParamTarget.PLAN and script is not None and p.key not in SCRIPT_SEES:
            problems.append(f"{p.name}: your script is not told this setting (it reads only "
                            "the DTGUI_* variables of docs/own-scripts.md); vary a script "
                            "argument (--name=...) or a variable of your own (env:NAME) instead.")
    for p in spec.params:  # the plan must be valid at every end of every space
        for value in p.space.extremes():
            for problem in validate(apply(plan, {p.name: value}, spec.params)):
                problems.append(f"{p.name}={value}: {problem}")
                break
    return list(dict.fromkeys(problems))


def apply(plan: Plan, values: Mapping[str, Value], params: Sequence[Param]) -> Plan:
    """The plan of one trial: `values` by parameter name."""
    changes: dict[str, Any] = {}
    env: dict[str, str] = {}
    args: dict[str, str] = {}
    for p in params:
        if p.name not in values:
            continue
        value = values[p.name]
        if p.target is ParamTarget.PLAN:
            changes[p.key] = value
        elif p.target is ParamTarget.ENV:
            env[p.key] = _exact_text(value)
        else:
            args[p.key] = _exact_text(value)
    script = plan.script
    if script is not None and (env or args):
        changes["model"] = _with_script(script, env, args)
    return plan.with_changes(**changes) if changes else plan


def _exact_text(value: Value) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _with_script(script: ScriptModel, env: Mapping[str, str],
                 args: Mapping[str, str]) -> ScriptModel:
    """The script with its variables set and its options given: an option it already has
    gets the new value (`--x V` or `--x=V`), another is added as `--x V`."""
    out = list(script.args)
    for option, value in args.items():
        for i, arg in enumerate(out):
            if arg == option and i + 1 < len(out):
                out[i + 1] = value
                break
            if arg.startswith(option + "="):
                out[i] = f"{option}={value}"
                break
        else:
            out += [option, value]
    return dataclasses.replace(script, env={**script.env, **env}, args=tuple(out))


# -- the sweep's folder --------------------------------------------------------------------
def save_sweep(folder: Path, spec: SweepSpec, plan: Plan) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    data = {"spec": spec.to_dict(), "plan": plan.to_dict()}
    tmp = folder / (SWEEP_FILE + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(folder / SWEEP_FILE)


def load_sweep(folder: Path,
               jobs: Mapping[str, JobReader] | None = None) -> tuple[SweepSpec, Plan]:
    """The sweep in `folder`; `jobs`: as `SweepSpec.from_dict`'s (what starts trials passes
    its drivers' readers)."""
    path = folder / SWEEP_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return SweepSpec.from_dict(data["spec"], jobs), Plan.from_dict(data["plan"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SweepError([f"{path} cannot be read: {exc}"]) from exc
