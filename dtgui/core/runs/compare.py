"""Comparing finished runs: each run's curves and summary row, and the table as CSV.

Pure Python + numpy (no Qt): `summarize_run(bundle_dir)` reads a bundle's plan.json and
events files (it blocks on the disk: call it off the UI thread) through the run's
`RunCurves` (dtgui.core.run_curves, the reducer the dashboard uses too) into a `RunSummary`
holding the mean training loss and the validation loss by step and by wall time, the plan's
settings, the median throughput and the final and best values. `table_rows` and
`summary_csv` turn summaries into the compare view's table and its CSV export.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dtgui.core.curve_values import best_point, median_throughput, preferred_metric
from dtgui.core.measure.bottleneck import RunFacts, Verdict, plan_facts, verdict
from dtgui.core.plans.plan import LOCAL_MACHINE
from dtgui.core.run_curves import RunCurves, bundle_curves
from dtgui.core.series import Curve

MISSING = "\u2014"  # shown for a value a run does not have (an older run's optimizer)


@dataclass
class RunSummary:
    name: str
    bundle: str
    state: str = ""
    strategy: str = ""
    machines: str = LOCAL_MACHINE
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
    # (name, value): what the run is listed with (RunCurves.best_validation)
    listed_val: tuple[str, float] | None = None
    loss: Curve = field(default_factory=Curve)  # mean training loss over every replica
    validation: dict[str, Curve] = field(default_factory=dict)  # "loss" and each metric
    limit: Verdict = field(default_factory=lambda: Verdict(""))  # where the time went
    facts: RunFacts = field(default_factory=RunFacts)  # what the advice depends on
    error: str = ""  # why the run could not be read (it is still listed)


def _plan_facts(summary: RunSummary, plan: dict[str, Any]) -> None:
    from dtgui.core.plans.plan import Plan, PlanError
    from dtgui.core.plans.plan_text import (
        SCRIPT_OWN,
        all_reduce_text,
        optimizer_text,
        schedule_text,
    )

    summary.strategy = str(plan.get("strategy", ""))
    summary.precision = str(plan.get("precision", ""))
    xla = plan.get("xla")
    summary.xla = bool(xla) if isinstance(xla, bool) else None
    steps = plan.get("steps")
    summary.steps = int(steps) if isinstance(steps, int) else 0
    try:
        parsed = Plan.from_dict(plan)
    except PlanError as exc:  # still listed, with what plan.json shows and why it is no more
        summary.error = summary.error or str(exc)
        return
    if parsed.script is not None:  # it trains its own way: the plan's values are hints
        summary.optimizer = summary.schedule = SCRIPT_OWN
        summary.steps = 0
    else:
        if "optimizer" in plan:  # runs from before optimizers could be chosen show none
            summary.optimizer = optimizer_text(parsed)
        if "lr_schedule" in plan:
            summary.schedule = schedule_text(parsed)
    if levers := all_reduce_text(parsed):  # compared runs differ by it: beside precision
        summary.precision += f", all-reduce {levers}"
    summary.replicas = parsed.total_replicas
    summary.global_batch = parsed.global_batch
    summary.machines = ", ".join(parsed.machine_names) or LOCAL_MACHINE
    summary.facts = plan_facts(parsed)
    if not summary.name:
        summary.name = parsed.run_name


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
    _fold(summary, bundle_curves(bundle, summary.steps))
    return summary


def _fold(summary: RunSummary, curves: RunCurves) -> None:
    summary.loss = curves.loss_curve()
    summary.steps_done = curves.steps_done()
    summary.final_loss = curves.final_loss()
    summary.throughput = median_throughput(curves.throughput_views())
    summary.validation = curves.validation_curves()
    summary.limit = verdict(curves.splits.values(), summary.facts, curves.memory.devices(),
                            curves.cpu_loads())
    summary.listed_val = curves.best_validation()
    val_loss = summary.validation.get("loss")
    if val_loss is not None:
        summary.best_val_loss = best_point(val_loss.steps, val_loss.values, "loss")
    metric = preferred_metric([m for m in summary.validation if m != "loss"])
    if metric:
        curve = summary.validation[metric]
        best = best_point(curve.steps, curve.values, metric)
        if best is not None:
            summary.best_val_metric = (metric, *best)


# -- the table ------------------------------------------------------------------------------

FIELDS = ("Run", "State", "Strategy", "Machines", "Replicas", "Precision", "XLA",
          "Global batch", "Optimizer", "Learning rate", "Steps", "Throughput (examples/s)",
          "Final loss", "Best validation loss", "Best validation metric", "Limited by")


# What each row of the table means (the view's row headers say it on hover).
FIELD_MEANINGS = {
    "State": "How the run ended (or that it still trains)",
    "Strategy": "The tf.distribute strategy",
    "Machines": "The machines its tasks ran on",
    "Replicas": "Model copies trained in step, over every task",
    "Precision": "The numbers it computed in (mixed precision: float16 or bfloat16)",
    "XLA": "Whether its step was compiled by XLA",
    "Global batch": "Examples a step, over every replica",
    "Optimizer": "The optimizer, with its decay, momentum, clipping and accumulation",
    "Learning rate": "Its learning rate and how it changed over the steps",
    "Steps": "Steps trained, of the steps planned",
    "Throughput (examples/s)": "Examples a second, the median over the run, every task",
    "Final loss": "The mean training loss at its last step",
    "Best validation loss": "Its lowest validation loss, at that step",
    "Best validation metric": "Its best validation metric, at that step",
    "Limited by": "What its step time went to most: input, compute, communication, memory",
}


def _number_text(value: float | None, digits: int = 4) -> str:
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
            _number_text(s.final_loss), val, metric, s.limit.short or MISSING,
        ])
    return rows


CSV_FIELDS = ("run", "state", "strategy", "machines", "replicas", "precision", "xla",
              "global_batch", "optimizer", "schedule", "steps_planned", "steps_done",
              "examples_per_sec_median", "final_loss", "best_val_loss", "best_val_loss_step",
              "best_val_metric", "best_val_metric_value", "best_val_metric_step",
              "limited_by", "limited_share", "limited_task", "bundle")


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
            s.limit.limit, f"{s.limit.share:.4f}" if s.limit.known else "", s.limit.task,
            s.bundle,
        ])
    return buffer.getvalue()
