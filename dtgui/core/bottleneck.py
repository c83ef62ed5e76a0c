"""Where a step's time goes, per task, and which limit a run hits (pure Python, no Qt, no TF).

Each training task measures its own step (`split` events, written by the worker's
`dtgui/worker/step_timing.py`; a script's `report()` writes them too): the seconds of one step
spent waiting for input, computing, communicating (the cross-replica reduction: all-reduce
across replicas and workers) and in dtgui's reporting. `StepSplit.from_event` reads one;
`RunCurves.splits` keeps each task's latest. `verdict(splits)` names the limit of the run,
the task where it is worst, its share of the step and what to change.

A `split` event (schema 2, added fields are optional):
``{"kind": "split", "task": ..., "step": last step measured, "steps": steps in the window,
"seconds_per_step": wall time of a step, "input"/"compute"/"communication"/"reporting":
seconds of a step, "measured": the parts measured, "method": "calibrated" | "report",
"calibration_seconds": what measuring cost so far (its recurring part), "setup_seconds":
making the calibration runs once (tracing them), "training_seconds": the task's training time so
far, "of_task": the task measured when another task reports it (the ParameterServer
coordinator reports its workers': "worker:1"), "method": "calibrated" | "worker-timed" |
"report"}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dtgui.core.memory import DeviceMemory, memory_advice
from dtgui.worker.plan import Plan

SPLIT_KIND = "split"
INPUT, COMPUTE, COMMUNICATION, REPORTING = "input", "compute", "communication", "reporting"
MEMORY = "memory"  # not a part of a step: a device near its memory limit
PARTS = (INPUT, COMPUTE, COMMUNICATION, REPORTING)
PART_NAMES = {INPUT: "input wait", COMPUTE: "compute", COMMUNICATION: "communication",
              REPORTING: "dtgui's reporting"}
# A run is input- or communication-bound when that part takes at least this share of a step
# on some task (below it, the device computes most of the time and compute is the limit).
BOUND_SHARE = 0.25
# dtgui's reporting is called out past this share (it is well under 1 % normally).
REPORTING_SHARE = 0.05


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
    calibration_seconds: float = 0.0  # what measuring cost the task so far (recurring)
    setup_seconds: float = 0.0  # making the calibration runs once, at the first calibration
    training_seconds: float = 0.0  # the task's training time so far

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
        step = data.get("step")
        return cls(task=task, step=step if isinstance(step, int) else 0,
                   measured=measured, method=str(data.get("method", "calibrated")),
                   calibration_seconds=_seconds(data.get("calibration_seconds")),
                   setup_seconds=_seconds(data.get("setup_seconds")),
                   training_seconds=_seconds(data.get("training_seconds")), **parts)

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
    def cost_share(self) -> float:
        """What measuring the split costs as it goes, as a share of the task's time (the
        calibration runs' making, once, is `setup_seconds`)."""
        total = self.training_seconds + self.calibration_seconds
        return self.calibration_seconds / total if total > 0 else 0.0


@dataclass(frozen=True)
class RunFacts:
    """What the advice depends on besides the split (all optional)."""

    gpu: bool = False  # the run trains on GPUs (mixed precision pays off there)
    xla: bool = False
    mixed_precision: bool = False
    hosts: int = 1  # machines the run spans
    per_replica_batch: int = 0
    parameter_servers: int = 0  # ParameterServer: its servers (communication is round trips)


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
        if self.time is not None and self.time.known:
            line += f". Step time: {self.time.text}"
        return line


def advice(limit: str, facts: RunFacts = RunFacts()) -> str:
    """What to change for a run limited by `limit`, given what the run already does."""
    if limit == INPUT:
        return ("the device waits for data: add .prefetch(tf.data.AUTOTUNE), "
                ".map(..., num_parallel_calls=tf.data.AUTOTUNE), .cache() a data set that "
                "fits in memory, .interleave() the reading of many files, keep the data on a "
                "local disk, or give the input more CPU")
    batch = f" (now {facts.per_replica_batch})" if facts.per_replica_batch else ""
    if limit == COMMUNICATION and facts.parameter_servers:
        return ("each step reads the variables from the parameter servers and sends the "
                f"gradients back: train a larger batch per worker{batch} so a round trip "
                "carries more examples, add parameter servers "
                f"(now {facts.parameter_servers}) to spread the variables and their traffic, "
                "or put the servers on the workers' fastest network")
    if limit == COMMUNICATION:
        tips = ["the replicas wait for each other's gradients: train a larger batch per "
                "replica" + batch + " or accumulate gradients over micro-batches"]
        tips.append("use NCCL (GPUs) or ring all-reduce as the hardware allows")
        if facts.hosts > 1:
            tips.append("put fewer machines behind a slow link")
        return ", ".join(tips)
    if limit == COMPUTE:
        tips = []
        if facts.gpu and not facts.mixed_precision:
            tips.append("mixed precision (mixed_float16)")
        if not facts.xla:
            tips.append("XLA")
        if not tips:
            return "the device is busy computing: a faster device or more replicas"
        return "the device is busy computing (as it should be): try " + " and ".join(tips)
    if limit == REPORTING:
        return "dtgui's reporting takes a visible share: log every N steps (Log every)"
    return ""


def verdict(splits: Iterable[StepSplit], facts: RunFacts = RunFacts(),
            memory: Iterable[DeviceMemory] = ()) -> Verdict:
    """The limit of a run: memory when a device came near its limit (dtgui.core.memory:
    the fullest, with the step time's verdict beside it: out-of-memory ends a run, slowness
    does not), else from its tasks' splits (`time_verdict`)."""
    step_time = time_verdict(splits, facts)
    near = [d for d in memory if d.near_limit]
    if not near:
        return step_time
    fullest = max(near, key=lambda d: (d.fraction, d.label))
    return Verdict(MEMORY, fullest.fraction, fullest.task,
                   "out-of-memory is near: " + memory_advice(fullest), device=fullest.device,
                   time=step_time)


def time_verdict(splits: Iterable[StepSplit], facts: RunFacts = RunFacts()) -> Verdict:
    """The limit of a run from its tasks' splits: input or communication where either takes
    BOUND_SHARE of a step on some task (the larger wins), dtgui's reporting past
    REPORTING_SHARE, else compute (at the task where it takes the largest share)."""
    splits = [s for s in splits if s.seconds_per_step > 0]
    if not splits:
        return Verdict("")

    def worst(part: str) -> tuple[float, str]:
        candidates = [(s.share(part), s.task) for s in splits if part in s.measured]
        return max(candidates, key=lambda c: (c[0], c[1])) if candidates else (0.0, "")

    found = [(worst(p), p) for p in (INPUT, COMMUNICATION)]
    (share, task), limit = max(found, key=lambda f: f[0][0])
    if share < BOUND_SHARE:
        (share, task), limit = worst(REPORTING), REPORTING
        if share < REPORTING_SHARE:
            (share, task), limit = worst(COMPUTE), COMPUTE
    return Verdict(limit, share, task, advice(limit, facts))


def plan_facts(plan: Plan) -> RunFacts:
    """RunFacts of a typed plan: its device kind, options and machines."""
    return RunFacts(gpu=plan.device_kind == "gpu", xla=plan.xla,
                    mixed_precision=plan.precision == "mixed_float16",
                    hosts=max(1, len(plan.machine_names)),
                    per_replica_batch=plan.per_replica_batch,
                    parameter_servers=plan.parameter_servers if plan.strategy.asynchronous
                    else 0)

