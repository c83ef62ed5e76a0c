"""Comparing finished runs: each run's curves and summary row, and the table as CSV.

Pure Python + numpy (no Qt): `summarize_run(bundle_dir)` reads a bundle's plan.json and
events files (it blocks on the disk: call it off the UI thread) into a `RunSummary` holding
the mean training loss and the validation loss by step and by wall time, the plan's settings,
the median throughput and the final and best values. `table_rows` and `summary_csv` turn
summaries into the compare view's table and its CSV export.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dtgui.core.events import STEP_KINDS, Event, read_all, step_rows

MISSING = "\u2014"  # shown for a value a run does not have (an older run's optimizer)
# validation metrics where lower is better (the others, such as accuracy, higher is better)
LOWER_IS_BETTER = ("loss", "error", "mae", "mse", "rmse", "mape", "msle", "hinge",
                   "crossentropy", "perplexity")
TASK_ORDER = {"chief": 0, "worker": 1, "ps": 2, "evaluator": 3}


def lower_is_better(metric: str) -> bool:
    name = metric.lower()
    return any(word in name for word in LOWER_IS_BETTER)


def best_index(values: np.ndarray, metric: str) -> int | None:
    """Where a metric's curve is best (the first such point), None if it has no finite value."""
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)
    if not finite.any():
        return None
    masked = np.where(finite, values, np.inf if lower_is_better(metric) else -np.inf)
    return int(np.argmin(masked) if lower_is_better(metric) else np.argmax(masked))


def _empty() -> np.ndarray:
    return np.empty(0, dtype=np.float64)


@dataclass
class Curve:
    """A curve by step, with the wall time of each point (seconds since the run's first
    event)."""

    steps: np.ndarray = field(default_factory=_empty)
    values: np.ndarray = field(default_factory=_empty)
    seconds: np.ndarray = field(default_factory=_empty)

    def __len__(self) -> int:
        return len(self.steps)


@dataclass
class RunSummary:
    name: str
    bundle: str
    state: str = ""
    strategy: str = ""
    machines: str = "local"
    replicas: int = 0
    precision: str = ""
    xla: bool | None = None
    global_batch: int = 0
    optimizer: str = ""  # "" = not in the plan (a run from before optimizers were chosen)
    schedule: str = ""
    steps: int = 0  # planned
    steps_done: int = 0
    throughput: float | None = None  # median examples/s of the run (all tasks together)
    final_loss: float | None = None
    best_val_loss: tuple[float, int] | None = None  # (value, step)
    best_val_metric: tuple[str, float, int] | None = None  # (name, value, step)
    loss: Curve = field(default_factory=Curve)  # mean training loss over every replica
    validation: dict[str, Curve] = field(default_factory=dict)  # "loss" and each metric
    error: str = ""  # why the run could not be read (it is still listed)


def task_key(task: str) -> tuple[int, int, str]:
    kind, _, index = task.partition(":")
    return TASK_ORDER.get(kind, 9), int(index) if index.isdigit() else 0, task


def _plan_facts(summary: RunSummary, plan: dict[str, Any]) -> None:
    from dtgui.core.plan import Plan, PlanError
    from dtgui.core.plan_text import optimizer_text, schedule_text

    summary.strategy = str(plan.get("strategy", ""))
    summary.precision = str(plan.get("precision", ""))
    xla = plan.get("xla")
    summary.xla = bool(xla) if isinstance(xla, bool) else None
    steps = plan.get("steps")
    summary.steps = int(steps) if isinstance(steps, int) else 0
    try:
        parsed = Plan.from_dict(plan)
    except (PlanError, TypeError, ValueError, KeyError):
        return
    if "optimizer" in plan:  # runs from before optimizers could be chosen show none
        summary.optimizer = optimizer_text(parsed)
    if "lr_schedule" in plan:
        summary.schedule = schedule_text(parsed)
    summary.replicas = parsed.total_replicas
    summary.global_batch = parsed.global_batch
    summary.machines = ", ".join(parsed.machine_names) or "local"
    if not summary.name:
        summary.name = parsed.run_name


class _Reader:
    """Folds one task's events into curves: steps rewound at a resume, like the dashboard."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.steps: list[np.ndarray] = []
        self.means: list[np.ndarray] = []
        self.ends: list[tuple[float, float]] = []  # (last step of a call, its time)
        self.rates: list[float] = []
        self.validation: dict[str, list[tuple[float, float, float]]] = {}
        self.finished_loss: float | None = None
        self.timeline: list[tuple[float, float]] = []

    def add(self, event: Event) -> None:
        if event.kind in STEP_KINDS:
            rows = step_rows(event.data)
            if rows is None or not len(rows.steps):
                return
            self.steps.append(rows.steps.astype(np.float64))
            self.means.append(rows.means.astype(np.float64))
            self.ends.append((float(rows.steps[-1]), event.t - self.t0))
            rate = event.get("examples_per_sec")
            if isinstance(rate, (int, float)) and rate > 0:
                self.rates.append(float(rate))
        elif event.kind == "started":
            resumed = event.get("resumed_from_step")
            start = resumed if isinstance(resumed, int) and resumed > 0 else 0
            if start:
                self._rewind(start)
            # the first call's steps ran between the start and its end
            self.ends = [e for e in self.ends if e[0] < start]
            self.ends.append((float(start), event.t - self.t0))
        elif event.kind == "validation":
            step = event.get("step")
            if not isinstance(step, (int, float)):
                return
            values = dict(event.get("metrics") or {})
            values["loss"] = event.get("loss")
            for name, value in values.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.validation.setdefault(str(name), []).append(
                        (float(step), float(value), event.t - self.t0))
        elif event.kind == "finished":
            loss = event.get("loss")
            if isinstance(loss, (int, float)):
                self.finished_loss = float(loss)

    def _rewind(self, step: int) -> None:
        if not self.steps:
            return
        steps, means = np.concatenate(self.steps), np.concatenate(self.means)
        keep = steps <= step
        self.steps, self.means = [steps[keep]], [means[keep]]
        self.ends = [e for e in self.ends if e[0] < step]
        for name, points in self.validation.items():
            self.validation[name] = [p for p in points if p[0] <= step]

    def loss_curve(self) -> Curve:
        if not self.steps:
            return Curve()
        steps, means = np.concatenate(self.steps), np.concatenate(self.means)
        finite = np.isfinite(means)
        steps, means = steps[finite], means[finite]
        ends = np.array(self.ends, dtype=np.float64).reshape(-1, 2)
        # a call's steps share one event time: in between, the time grows linearly
        order = np.argsort(ends[:, 0], kind="stable")
        seconds = np.interp(steps, ends[order, 0], ends[order, 1]) if len(ends) else steps * 0
        return Curve(steps, means, seconds)

    def validation_curves(self) -> dict[str, Curve]:
        out = {}
        for name, points in self.validation.items():
            arr = np.array(points, dtype=np.float64).reshape(-1, 3)
            out[name] = Curve(arr[:, 0], arr[:, 1], arr[:, 2])
        return out


def summarize_run(bundle_dir: Path | str, name: str = "", state: str = "") -> RunSummary:
    """Read one run's bundle (plan.json and output/events-*.jsonl). Blocks on the disk."""
    bundle = Path(bundle_dir)
    summary = RunSummary(name=name, bundle=str(bundle), state=state)
    try:
        plan = json.loads((bundle / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        summary.error = f"no readable plan.json ({exc})"
        plan = {}
    if isinstance(plan, dict):
        _plan_facts(summary, plan)
    if not summary.name:
        summary.name = bundle.name
    files = sorted((bundle / "output").glob("events-*.jsonl"))
    per_task: dict[str, list[Event]] = {}
    for path in files:
        for event in read_all(path):
            per_task.setdefault(event.task, []).append(event)
    if not per_task:
        return summary
    t0 = min(events[0].t for events in per_task.values() if events)
    readers = {}
    for task in sorted(per_task, key=task_key):
        reader = _Reader(t0)
        for event in per_task[task]:
            reader.add(event)
        readers[task] = reader
    _fold(summary, readers)
    return summary


def _fold(summary: RunSummary, readers: dict[str, _Reader]) -> None:
    # The mean over every replica is the same on every worker: the first task that trained
    # gives the curve (the ParameterServer chief; worker 0 otherwise).
    trained = [r for r in readers.values() if r.steps]
    main = trained[0] if trained else None
    if main is not None:
        summary.loss = main.loss_curve()
        if len(summary.loss):
            summary.steps_done = int(summary.loss.steps[-1])
        summary.final_loss = main.finished_loss
        if summary.final_loss is None and len(summary.loss):
            summary.final_loss = float(summary.loss.values[-1])
    # examples/s: each task counts its own examples, so the run's rate is their sum
    medians = [float(np.median(r.rates)) for r in readers.values() if r.rates]
    summary.throughput = sum(medians) if medians else None
    validating = [r for r in readers.values() if r.validation]
    if validating:
        summary.validation = validating[0].validation_curves()
    val_loss = summary.validation.get("loss")
    if val_loss is not None:
        i = best_index(val_loss.values, "loss")
        if i is not None:
            summary.best_val_loss = (float(val_loss.values[i]), int(val_loss.steps[i]))
    metric = preferred_metric([m for m in summary.validation if m != "loss"])
    if metric:
        curve = summary.validation[metric]
        i = best_index(curve.values, metric)
        if i is not None:
            summary.best_val_metric = (metric, float(curve.values[i]), int(curve.steps[i]))


def preferred_metric(names: Sequence[str]) -> str:
    """The validation metric to show first: accuracy when there is one."""
    for name in names:
        if name == "accuracy":
            return name
    return names[0] if names else ""


# -- the table ------------------------------------------------------------------------------

FIELDS = ("Run", "State", "Strategy", "Machines", "Replicas", "Precision", "XLA",
          "Global batch", "Optimizer", "Schedule", "Steps", "Throughput (examples/s)",
          "Final loss", "Best validation loss", "Best validation metric")


def _number(value: float | None, digits: int = 4) -> str:
    return MISSING if value is None else f"{value:.{digits}g}"


def table_rows(summaries: Iterable[RunSummary]) -> list[list[str]]:
    """One row of display text per run, in FIELDS order ("—" for what a run does not have)."""
    rows = []
    for s in summaries:
        steps = f"{s.steps_done:,} of {s.steps:,}" if s.steps and s.steps_done != s.steps \
            else (f"{s.steps:,}" if s.steps else (f"{s.steps_done:,}" if s.steps_done else MISSING))
        val = (f"{s.best_val_loss[0]:.4g} (step {s.best_val_loss[1]:,})"
               if s.best_val_loss else MISSING)
        metric = (f"{s.best_val_metric[0]} {s.best_val_metric[1]:.4g} "
                  f"(step {s.best_val_metric[2]:,})" if s.best_val_metric else MISSING)
        rows.append([
            s.name, s.state or MISSING, s.strategy or MISSING, s.machines or MISSING,
            str(s.replicas) if s.replicas else MISSING, s.precision or MISSING,
            MISSING if s.xla is None else ("on" if s.xla else "off"),
            str(s.global_batch) if s.global_batch else MISSING,
            s.optimizer or MISSING, s.schedule or MISSING, steps,
            MISSING if s.throughput is None else f"{s.throughput:,.0f}",
            _number(s.final_loss), val, metric,
        ])
    return rows


CSV_FIELDS = ("run", "state", "strategy", "machines", "replicas", "precision", "xla",
              "global_batch", "optimizer", "schedule", "steps_planned", "steps_done",
              "examples_per_sec_median", "final_loss", "best_val_loss", "best_val_loss_step",
              "best_val_metric", "best_val_metric_value", "best_val_metric_step", "bundle")


def _raw(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def summary_csv(summaries: Iterable[RunSummary]) -> str:
    """The table as CSV, one row per run: plain numbers (no separators or units) and an empty
    cell for what a run does not have, as spreadsheets read them."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for s in summaries:
        writer.writerow([
            s.name, s.state, s.strategy, s.machines, s.replicas or "", s.precision,
            "" if s.xla is None else str(s.xla).lower(), s.global_batch or "",
            s.optimizer, s.schedule, s.steps or "", s.steps_done or "",
            "" if s.throughput is None else f"{s.throughput:.2f}", _raw(s.final_loss),
            _raw(s.best_val_loss[0]) if s.best_val_loss else "",
            s.best_val_loss[1] if s.best_val_loss else "",
            s.best_val_metric[0] if s.best_val_metric else "",
            _raw(s.best_val_metric[1]) if s.best_val_metric else "",
            s.best_val_metric[2] if s.best_val_metric else "",
            s.bundle,
        ])
    return buffer.getvalue()
