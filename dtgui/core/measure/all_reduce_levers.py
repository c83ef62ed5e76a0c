"""The all-reduce's levers as advice: what compressing the gradients would win, predicted from
what was measured (a step's split, or the doctor's links and the model's gradient bytes).

Compression to float16 or bfloat16 halves the bytes the all-reduce moves; on a link that
decides the step that halves the all-reduce's time (its round trips stay, small beside it).
A step of compute c and all-reduce a becomes c + a/2: the gain is (c + a) / (c + a/2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dtgui.core.measure.network_pairs import (
    REFERENCE_PARAMS,
    LinkTest,
    between,
    ring_allreduce_seconds,
    seconds_text,
    slowest,
)
from dtgui.worker.plan import Plan

WIRE_SHARE = 0.5  # float16 / bfloat16 bytes over float32's
# the all-reduce's share of a step from which the review recommends the levers
DOMINANT_SHARE = 0.5

# The pack size (bytes_per_pack) is not advised: on the shaped links of
# packaging/benchmark_links.py no size measured a gain that the machine's load did not explain
# (docs/performance.md).
SCRIPT_ADVICE = (
    "in your script, cast the gradients to float16 before the all-reduce and back to float32 "
    "before apply_gradients (replica_context.all_reduce(SUM, [tf.cast(g, tf.float16) ...]), "
    "the optimizer's own all-reduce skipped)")


def compression_gain(all_reduce_share: float) -> float:
    """Steps/s with the gradients compressed over steps/s without, for a step whose
    all-reduce takes `all_reduce_share` of it."""
    share = min(max(all_reduce_share, 0.0), 1.0)
    return 1.0 / (1.0 - share * (1 - WIRE_SHARE))


def lever_advice(all_reduce_share: float, *, compressed: bool, own_script: bool) -> str:
    """The lever a network-bound run has not pulled, with its gain ("" when none is left)."""
    gain = compression_gain(all_reduce_share)
    if own_script:
        return f"{SCRIPT_ADVICE} (about {gain:.1f}× the steps/s)"
    if compressed:
        return ""
    return ("compress the gradients for the all-reduce (wizard, Options: On the wire: float16) "
            f"— half the bytes, about {gain:.1f}× the steps/s")


@dataclass(frozen=True)
class StepForecast:
    """A step predicted before launch: its compute (when known) and its all-reduce over the
    slowest measured link."""

    all_reduce: float  # seconds
    compute: float = 0.0  # seconds (0: not known)

    @property
    def all_reduce_share(self) -> float:
        total = self.all_reduce + self.compute
        return self.all_reduce / total if total > 0 else 0.0

    @property
    def dominant(self) -> bool:
        return self.all_reduce_share >= DOMINANT_SHARE


def forecast(gradient_bytes: float, workers: int, bandwidth: float, rtt_ms: float,
             compute: float = 0.0, compressed: bool = False) -> StepForecast:
    """The step's all-reduce of `gradient_bytes` (float32) over `workers` on a link of
    `bandwidth` bytes/s, compressed or not, beside its `compute` seconds."""
    nbytes = gradient_bytes * (WIRE_SHARE if compressed else 1.0)
    return StepForecast(ring_allreduce_seconds(nbytes, workers, bandwidth, rtt_ms), compute)


def plan_forecast(plan: Plan, links: Sequence[LinkTest], gradient_bytes: int,
                  compute: float) -> str:
    """The review page's line for a placed plan ("" when its all-reduce does not cross
    machines, or no link between them was measured): its step on the slowest measured link
    between its machines, the model's `gradient_bytes` (float32; 0 when not known: a 10 M
    parameter model's) and a batch's `compute` seconds (0: not known)."""
    machines = [m for m in plan.machine_names]
    if len(machines) < 2 or not (plan.strategy.all_reduces_gradients
                                 or plan.script is not None):
        return ""
    worst = slowest(between(links, machines))
    if worst is None:
        return (f"Not predicted: the doctor has not measured the links between "
                f"{', '.join(machines)} (Machines → Doctor…).")
    nbytes = gradient_bytes or REFERENCE_PARAMS * 4
    compressed = plan.grad_compression != "none"
    step = forecast(nbytes, plan.compute_tasks, worst.bandwidth, worst.rtt_ms, compute,
                    compressed)
    whose = "" if gradient_bytes else " (of a 10 M-parameter model: the size is not known)"
    return forecast_text(step, compressed, plan.script is not None) + whose


def forecast_text(step: StepForecast, compressed: bool, own_script: bool) -> str:
    """The review page's line: the predicted step, and the lever when the all-reduce
    dominates (with the step it predicts)."""
    parts = [f"all-reduce {seconds_text(step.all_reduce)} a step"]
    if step.compute:
        parts.insert(0, f"compute {seconds_text(step.compute)}")
    text = "Predicted on the doctor's links: " + ", ".join(parts)
    if step.compute and not step.dominant:
        return text + "."
    advice = lever_advice(step.all_reduce_share if step.compute else 1.0,
                          compressed=compressed, own_script=own_script)
    if not advice:
        return text + " (gradients compressed)."
    if not step.compute:
        return (f"{text}; the compute is not known before the run: where the all-reduce "
                f"dominates, {advice}.")
    return f"{text}: the all-reduce dominates — {advice}."
