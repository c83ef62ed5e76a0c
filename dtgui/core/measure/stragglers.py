"""Straggler detection: a worker clearly slower than the rest.

Input: the per-task throughput series of `LiveRun` (examples/s at each reported step).
A worker is a straggler when the median of its last `window` reports is below `ratio` times
the median of the other workers' recent throughput, with at least `min_reports` reports each.
Synchronous strategies (MultiWorkerMirrored) make every worker wait for the slowest, so there
the slowest worker drags all throughputs down together; a per-worker gap shows when workers
run at their own pace (each step's examples/s is measured by the worker itself).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

WINDOW = 10
RATIO = 0.6
MIN_REPORTS = 5


def find_stragglers(throughput: Mapping[str, tuple[np.ndarray, np.ndarray]], *,
                    window: int = WINDOW, ratio: float = RATIO,
                    min_reports: int = MIN_REPORTS) -> dict[str, float]:
    """task -> its recent throughput as a fraction of the others' median, for stragglers."""
    recent: dict[str, float] = {}
    for task, (_, ys) in throughput.items():
        if not task.startswith("worker:") or len(ys) < min_reports:
            continue
        tail = np.asarray(ys[-window:], dtype=np.float64)
        tail = tail[np.isfinite(tail)]
        if len(tail):
            recent[task] = float(np.median(tail))
    if len(recent) < 2:
        return {}
    out: dict[str, float] = {}
    for task, value in recent.items():
        others = [v for t, v in recent.items() if t != task]
        reference = float(np.median(others))
        if reference > 0 and value < ratio * reference:
            out[task] = value / reference
    return out


def describe_straggler(task: str, fraction: float, machine: str = "") -> str:
    where = f" on {machine}" if machine else ""
    return (f"{task}{where} is a straggler: {fraction:.0%} of the other workers' throughput "
            "(a slower or busier machine?)")
