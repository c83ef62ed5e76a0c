"""Where a step's time goes, per task, and which limit a run hits (pure Python, no Qt, no TF).

Each training task measures its own step (`split` events, written by the worker's
`dtgui/worker/step_timing.py`; a script's `report()` writes them too): the seconds of one step
spent waiting for input, computing, communicating (the cross-replica reduction: all-reduce
across replicas and workers) and in dtgui's reporting. `StepSplit.from_event` reads one;
`RunCurves` keeps each task's latest and a window of its last few (`window_split` merges
them). `verdict(splits)` names the limit of the run, the task where it is worst, its share of
the step and what to change. It is decided with hysteresis: a limit other than the one shown
(`previous`) must pass its threshold by HYSTERESIS, the one shown keeps its place until it
falls as far below, so that noise does not flip it. The verdict leads with the part of the
step that limits the run and its advice; when the machine's CPU is full and other processes
take much of it (`CpuLoad`, from the telemetry's `device` events) and that part is one they
can slow (compute on CPUs, the input pipeline), a second line says so (`Verdict.crowded`):
compute on a CPU shared with other programs is slowed by them for certain, an input pipeline
only where it computes on the CPU (one that waits on files, the network or a sleep is not sped
up by an idle machine), so its line says which.

A `split` event (schema 2, added fields are optional):
``{"kind": "split", "task": ..., "step": last step measured, "steps": steps in the window,
"seconds_per_step": wall time of a step, "input"/"compute"/"communication"/"reporting":
seconds of a step, "measured": the parts measured, "method": "calibrated" | "report",
"calibration_seconds": what measuring took so far, making the calibration runs included,
"setup_seconds": of which making them, "training_seconds": the task's training time so far
(its calls and reporting), "clock_seconds": the clock's since its training began, "budget": the
share of a long run measuring may take, "of_task": the task measured when
another task reports it (the ParameterServer coordinator reports its workers': "worker:1"),
"method": "calibrated" | "worker-timed" | "report"}``. A task not measured yet, its run too
short so far for a measure within the budget, sends ``{"kind": "split", "steps": 0,
"deferred_clock": seconds since its training began from which it will be, "clock_seconds": ...}``
(written before the budget counted the clock: "deferred_until", seconds of training).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dtgui.core.measure.all_reduce_levers import lever_advice
from dtgui.core.measure.memory import DeviceMemory, memory_advice
from dtgui.worker.plan import Plan

SPLIT_KIND = "split"
INPUT, COMPUTE, COMMUNICATION, REPORTING = "input", "compute", "communication", "reporting"
MEMORY = "memory"  # not a part of a step: a device near its memory limit
CPU = "cpu"  # not a part of a step: other processes take the machine's CPU
PARTS = (INPUT, COMPUTE, COMMUNICATION, REPORTING)
PART_NAMES = {INPUT: "input wait", COMPUTE: "compute", COMMUNICATION: "communication",
              REPORTING: "dtgui's reporting"}
# A run is input- or communication-bound when that part takes at least this share of a step
# on some task (below it, the device computes most of the time and compute is the limit).
BOUND_SHARE = 0.25
# dtgui's reporting is called out past this share (it is well under 1 % normally).
REPORTING_SHARE = 0.05
# Hysteresis: a limit other than the one shown must pass its threshold by this share of a
# step (or of the CPU), the one shown stays until it is as far below it.
HYSTERESIS = 0.05
WINDOW_SPLITS = 6  # a task's last split events the verdict weighs (~30 s at one per ~5 s)
WINDOW_SAMPLES = 8  # a task's last CPU samples (~16 s at one per ~2 s)
# Other processes are the limit when the machine's CPU is at least BUSY_SHARE busy and they
# take at least OTHERS_SHARE of it.
BUSY_SHARE = 0.9
OTHERS_SHARE = 0.3


def _seconds(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        return max(0.0, float(value))
    return 0.0


@dataclass(frozen=True)
class StepSplit:
    """One task's step, in seconds per step by part, as it measured it last."""

    task: str
    step: int = 0  # the last step of the measured window
    input: float = 0.0
    compute: float = 0.0
    communication: float = 0.0
    reporting: float = 0.0
    measured: tuple[str, ...] = PARTS  # parts measured (a script without help: fewer)
    method: str = "calibrated"
    calibration_seconds: float = 0.0  # what measuring took so far, setup included
    setup_seconds: float = 0.0  # of which making the calibration runs, at the first one
    training_seconds: float = 0.0  # the task's training time so far
    clock_seconds: float = 0.0  # the clock's since its training began (0: not said)
    steps: int = 0  # the steps the split is measured over (its weight in a window)

    @classmethod
    def from_event(cls, task: str, data: Mapping[str, Any]) -> StepSplit | None:
        """The split a `split` event of `task` carries (of its `of_task` when it reports
        another task's); None when it holds no time."""
        of_task = data.get("of_task")
        if isinstance(of_task, str) and of_task.strip():
            task = of_task.strip()
        parts = {p: _seconds(data.get(p)) for p in PARTS}
        if sum(parts.values()) <= 0:
            return None
        raw = data.get("measured")
        measured = tuple(p for p in PARTS if isinstance(raw, list) and p in raw) or PARTS
        step, steps = data.get("step"), data.get("steps")
        return cls(task=task, step=step if isinstance(step, int) else 0,
                   measured=measured, method=str(data.get("method", "calibrated")),
                   calibration_seconds=_seconds(data.get("calibration_seconds")),
                   setup_seconds=_seconds(data.get("setup_seconds")),
                   training_seconds=_seconds(data.get("training_seconds")),
                   clock_seconds=_seconds(data.get("clock_seconds")),
                   steps=steps if isinstance(steps, int) and steps > 0 else 0, **parts)

    @property
    def seconds_per_step(self) -> float:
        return self.input + self.compute + self.communication + self.reporting

    def seconds(self, part: str) -> float:
        return float(getattr(self, part))

    def share(self, part: str) -> float:
        """The part's share of a step (0..1)."""
        total = self.seconds_per_step
        return self.seconds(part) / total if total > 0 else 0.0

    def shares(self) -> dict[str, float]:
        return {p: self.share(p) for p in PARTS}

    @property
    def span(self) -> float:
        """Seconds since the task's training began (its training time in older events)."""
        return self.clock_seconds or self.training_seconds

    @property
    def cost_share(self) -> float:
        """What measuring the split took, making its runs included, as a share of the time
        since the task's training began (the split's worker keeps it within its budget: 5 % of
        the first minute, 1 % of a run of ten minutes or more)."""
        if self.span <= 0:
            return 0.0
        return self.calibration_seconds / self.span

    @property
    def cost_text(self) -> str:
        """What measuring took, in seconds on the clock a user sees: "measuring took 0.42 s
        of 1 min 05 s training (0.7 %)" ("" before it took any)."""
        if self.calibration_seconds <= 0 or self.span <= 0:
            return ""
        return (f"measuring took {self.calibration_seconds:.2g} s of {clock_text(self.span)} "
                f"training ({self.cost_share * 100:.2g} %)")


def clock_text(seconds: float) -> str:
    """A span as a clock reads it: "45 s", "1 min 05 s", "26 min"."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{round(seconds / 60)} min"


def window_split(recent: Sequence[StepSplit]) -> StepSplit | None:
    """A task's last splits as one: each part's seconds per step averaged over their steps
    (a split of unknown steps weighs as much as the mean), the latest's other fields."""
    if not recent:
        return None
    latest = recent[-1]
    if len(recent) == 1:
        return latest
    known = [s.steps for s in recent if s.steps > 0]
    default = sum(known) / len(known) if known else 1.0
    weights = [float(s.steps) if s.steps > 0 else default for s in recent]
    total = sum(weights)

    def mean(part: str) -> float:
        return sum(w * s.seconds(part) for w, s in zip(weights, recent, strict=True)) / total

    return replace(latest, steps=int(total), input=mean(INPUT), compute=mean(COMPUTE),
                   communication=mean(COMMUNICATION), reporting=mean(REPORTING))


@dataclass(frozen=True)
class CpuLoad:
    """A task's machine's CPU over the window: how busy it was (0..1 of all its cores) and
    how much of it the task's own processes took."""

    task: str
    busy: float
    own: float

    @property
    def others(self) -> float:
        """The share of the machine's CPU other processes took."""
        return max(0.0, self.busy - self.own)


def cpu_load(task: str, samples: Sequence[tuple[float, float]]) -> CpuLoad | None:
    """The load over a task's CPU samples, (machine busy %, the task's own %) each."""
    if not samples:
        return None
    busy = sum(b for b, _ in samples) / len(samples) / 100
    own = sum(o for _, o in samples) / len(samples) / 100
    return CpuLoad(task, min(1.0, max(0.0, busy)), min(1.0, max(0.0, own)))


@dataclass(frozen=True)
class RunFacts:
    """What the advice depends on besides the split (all optional)."""

    gpu: bool = False  # the run trains on GPUs (mixed precision pays off there)
    xla: bool = False
    mixed_precision: bool = False
    hosts: int = 1  # machines the run spans
    per_replica_batch: int = 0
    parameter_servers: int = 0  # ParameterServer: its servers (communication is round trips)
    builtin_data: bool = False  # the built-in demo: its input pipeline is dtgui's
    replicas: int = 0  # replicas in sync (0: not known)
    # the all-reduce's levers: whether they apply (an all-reduce dtgui's loop or a script's
    # own makes), whether the gradients are compressed already, and whether the run is a
    # user's own script (advice in words)
    levers: bool = False
    compressed: bool = False
    own_script: bool = False


@dataclass(frozen=True)
class Verdict:
    """The limit a run hits: "input", "communication", "compute", "reporting", "memory", or
    "" (not measured yet); its share on `task` where it is worst (of a step; for memory, of
    the device's memory, `device` naming it); what to change. A run near its memory limit
    is limited by memory first, and `time` keeps where its step time goes."""

    limit: str
    share: float = 0.0
    task: str = ""
    advice: str = ""
    device: str = ""  # memory: the device ("gpu0", "cpu0")
    time: Verdict | None = None  # memory: the step time's verdict beside it
    crowded: Verdict | None = None  # other processes' CPU use slowing that part ("cpu")

    @property
    def known(self) -> bool:
        return bool(self.limit)

    @property
    def figure(self) -> str:
        """The number behind the verdict: "input wait 62 % of each step on worker:1"."""
        if not self.limit:
            return "not measured yet"
        if self.limit == MEMORY:
            return f"memory {self.share * 100:.0f} % full on {self.task} {self.device}"
        if self.limit == CPU:
            return (f"other processes take {self.share * 100:.0f} % of the CPU on "
                    f"{self.task}'s machine")
        return f"{PART_NAMES[self.limit]} {self.share * 100:.0f} % of each step on {self.task}"

    @property
    def short(self) -> str:
        """For a table cell: "input 62 % (worker:1)"."""
        if not self.limit:
            return ""
        return f"{self.limit} {self.share * 100:.0f} % ({self.task})"

    @property
    def text(self) -> str:
        """The verdict line: the figure, then the advice (then the step time's)."""
        if not self.limit:
            return self.advice or "Where the time goes: not measured yet"
        line = f"{self.figure} — {self.advice}"
        if self.crowded is not None:
            line += f"; {self.crowded.figure} — {self.crowded.advice}"
        if self.time is not None and self.time.known:
            line += f". Step time: {self.time.text}"
        return line


def advice(limit: str, facts: RunFacts = RunFacts(), step: str = "", share: float = 0.0) -> str:
    """What to change for a run limited by `limit`, given what the run already does (`step`:
    for CPU, the part of the step it slows: COMPUTE or INPUT; `share`: the limit's share of a
    step, for the gain a lever predicts)."""
    batch = f" (now {facts.per_replica_batch})" if facts.per_replica_batch else ""
    fewer = f" (now {facts.replicas})" if facts.replicas else ""
    if limit == CPU:
        act = (f"close or pause them, train on an idle machine, or train fewer replicas "
               f"there{fewer}")
        if step == INPUT and not facts.builtin_data:
            return ("they slow the input pipeline only where it computes on the CPU "
                    f"(decoding, .map): if it does, {act}; a pipeline that waits on files, "
                    "the network or a sleep is not sped up by an idle machine")
        slowed = "the demo's input pipeline" if step == INPUT else \
            "the compute" if step == COMPUTE else "the steps"
        return f"other programs on the machine slow {slowed}: {act}"
    if limit == INPUT and facts.builtin_data:
        return ("the device waits for the demo's data (dtgui's own input pipeline): free the "
                f"CPU other programs use, train fewer replicas on this machine{fewer}, or a "
                f"larger batch per replica{batch} so each batch carries more work")
    if limit == INPUT:
        return ("the device waits for data: add .prefetch(tf.data.AUTOTUNE), "
                ".map(..., num_parallel_calls=tf.data.AUTOTUNE), .cache() a data set that "
                "fits in memory, .interleave() the reading of many files, keep the data on a "
                "local disk, or give the input more CPU")
    if limit == COMMUNICATION and facts.parameter_servers:
        return ("each step reads the variables from the parameter servers and sends the "
                f"gradients back: train a larger batch per worker{batch} so a round trip "
                "carries more examples, add parameter servers "
                f"(now {facts.parameter_servers}) to spread the variables and their traffic, "
                "or put the servers on the workers' fastest network")
    if limit == COMMUNICATION:
        tips = []
        lever = lever_advice(share, compressed=facts.compressed,
                             own_script=facts.own_script) if facts.levers else ""
        if lever:
            tips.append(lever)
        tips.append("the replicas wait for each other's gradients: train a larger batch per "
                    "replica" + batch + " or accumulate gradients over micro-batches")
        tips.append("use NCCL (GPUs) or ring all-reduce as the hardware allows")
        if facts.hosts > 1:
            tips.append("put fewer machines behind a slow link")
        return ", ".join(tips)
    if limit == COMPUTE:
        tips = []
        if facts.gpu and not facts.mixed_precision:
            tips.append("mixed precision (mixed_float16)")
        if not facts.xla:
            tips.append("XLA (wizard, Options)")
        if not tips:
            return "the device is busy computing: a faster device or more replicas"
        return "the device is busy computing (as it should be): try " + " and ".join(tips)
    if limit == REPORTING:
        return "dtgui's reporting takes a visible share: log every N steps (Log every)"
    return ""


def verdict(splits: Iterable[StepSplit], facts: RunFacts = RunFacts(),
            memory: Iterable[DeviceMemory] = (), loads: Iterable[CpuLoad] = (),
            previous: str = "", crowded: bool = False) -> Verdict:
    """The limit of a run: memory when a device came near its limit (dtgui.core.measure.memory:
    the fullest, with the step time's verdict beside it: out-of-memory ends a run, slowness
    does not), else from its tasks' splits and CPU loads (`time_verdict`; `previous`: the
    limit shown so far, `crowded`: whether its CPU line was, for the hysteresis)."""
    step_time = time_verdict(splits, facts, loads, previous, crowded)
    near = [d for d in memory if d.near_limit]
    if not near:
        return step_time
    fullest = max(near, key=lambda d: (d.fraction, d.label))
    return Verdict(MEMORY, fullest.fraction, fullest.task,
                   "out-of-memory is near: " + memory_advice(fullest), device=fullest.device,
                   time=step_time)


def _threshold(limit: str, share: float, previous: str) -> float:
    """`share` as the threshold of `limit`: raised by HYSTERESIS for a limit not shown,
    lowered by as much for the one shown."""
    return share - HYSTERESIS if limit == previous else share + HYSTERESIS


def time_verdict(splits: Iterable[StepSplit], facts: RunFacts = RunFacts(),
                 loads: Iterable[CpuLoad] = (), previous: str = "",
                 crowded: bool = False) -> Verdict:
    """The limit of a run from its tasks' splits: input or communication where either takes
    BOUND_SHARE of a step on some task (the larger wins), dtgui's reporting past
    REPORTING_SHARE, else compute (at the task where it takes the largest share). Beside an
    input or (on CPUs) compute limit, other processes' CPU use (`Verdict.crowded`) where they
    take OTHERS_SHARE of a machine BUSY_SHARE busy. Each threshold with hysteresis
    (`previous`: the limit shown; `crowded`: whether the CPU's line was shown)."""
    splits = [s for s in splits if s.seconds_per_step > 0]
    if not splits:
        return Verdict("")
    part = _part_verdict(splits, facts, previous)
    if part.limit == INPUT or (part.limit == COMPUTE and not facts.gpu):
        before = CPU if crowded else ""
        busy = BUSY_SHARE - HYSTERESIS if crowded else BUSY_SHARE
        others = _threshold(CPU, OTHERS_SHARE, before)
        full = [load for load in loads if load.busy >= busy and load.others >= others]
        if full:
            worst = max(full, key=lambda load: (load.others, load.task))
            return replace(part, crowded=Verdict(CPU, worst.others, worst.task,
                                                 advice(CPU, facts, part.limit)))
    return part


def _part_verdict(splits: list[StepSplit], facts: RunFacts, previous: str) -> Verdict:
    """The part of the step that limits the run (time_verdict, without the CPU's load). A
    communication that holds compute too (not told apart on that task) is not weighed: its
    share is only a bound."""

    def worst(part: str) -> tuple[float, str]:
        candidates = [(s.share(part), s.task) for s in splits if part in s.measured
                      and not (part == COMMUNICATION and COMPUTE not in s.measured)]
        return max(candidates, key=lambda c: (c[0], c[1])) if candidates else (0.0, "")

    found = [(worst(p), p) for p in (INPUT, COMMUNICATION)]
    found = [f for f in found if f[0][0] >= _threshold(f[1], BOUND_SHARE, previous)]
    if found:
        (share, task), limit = max(found, key=lambda f: f[0][0])
    else:
        (share, task), limit = worst(REPORTING), REPORTING
        if share < _threshold(REPORTING, REPORTING_SHARE, previous):
            (share, task), limit = worst(COMPUTE), COMPUTE
    return Verdict(limit, share, task, advice(limit, facts, share=share))


def plan_facts(plan: Plan) -> RunFacts:
    """RunFacts of a typed plan: its device kind, options and machines."""
    return RunFacts(gpu=plan.device_kind == "gpu", xla=plan.xla,
                    mixed_precision=plan.precision == "mixed_float16",
                    hosts=max(1, len(plan.machine_names)),
                    per_replica_batch=plan.per_replica_batch,
                    parameter_servers=plan.parameter_servers if plan.strategy.asynchronous
                    else 0,
                    builtin_data=plan.model_kind == "demo", replicas=plan.total_replicas,
                    levers=plan.strategy.all_reduces_gradients and plan.total_replicas > 1,
                    compressed=plan.grad_compression != "none",
                    own_script=plan.script is not None)

