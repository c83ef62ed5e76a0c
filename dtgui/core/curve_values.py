"""What a curve's values say: which way a metric is better, where it was best, which
validation metric to show first, and a run's throughput from its tasks' rates."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

# validation metrics where lower is better (the others, such as accuracy, higher is better)
LOWER_IS_BETTER = ("loss", "error", "mae", "mse", "rmse", "mape", "msle", "hinge",
                   "crossentropy", "perplexity")


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


def best_point(steps: np.ndarray, values: np.ndarray, metric: str) -> tuple[float, int] | None:
    """(best value, its step) of a metric's curve; None when it has no finite value."""
    i = best_index(values, metric)
    return None if i is None else (float(values[i]), int(steps[i]))


def preferred_metric(names: Sequence[str]) -> str:
    """The validation metric to show first: accuracy when there is one."""
    for name in names:
        if name == "accuracy":
            return name
    return names[0] if names else ""


def best_validation(bests: Mapping[str, float]) -> tuple[str, float] | None:
    """The validation value a run is listed with, from each validation metric's best
    (`bests`, "loss" for the validation loss): the loss's, else the preferred metric's;
    named as a sweep's objective is ("val_loss", "val_accuracy"). None before any."""
    if "loss" in bests:
        return "val_loss", bests["loss"]
    metric = preferred_metric(list(bests))
    return (f"val_{metric}", bests[metric]) if metric else None


def better(metric: str, value: float, than: float | None) -> bool:
    """Whether `value` of `metric` beats `than` (None: nothing yet); NaN never does."""
    if math.isnan(value):
        return False
    return than is None or (value < than if lower_is_better(metric) else value > than)


def median_throughput(throughput: dict[str, tuple[np.ndarray, np.ndarray]]) -> float | None:
    """The run's examples/s: each task counts its own examples, so the sum of the tasks'
    median rates (None when no task reported one)."""
    medians = []
    for _, ys in throughput.values():
        rates = np.asarray(ys, dtype=np.float64)
        rates = rates[np.isfinite(rates) & (rates > 0)]
        if len(rates):
            medians.append(float(np.median(rates)))
    return sum(medians) if medians else None
