"""Sentences the wizard shows about a plan (pure functions: no widgets)."""

from __future__ import annotations

from dtgui.core.machines.hardware import MachineFacts
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy

PRECISION_HINT = ("bfloat16 is fast on TPUs and recent CPUs/GPUs (Ampere+); float16 needs a GPU "
                  "with tensor cores (compute capability ≥ 7.0) to be faster.")


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def global_batch_text(plan: Plan) -> str:
    """The global batch and how it is made, e.g. "64 = 32 × 2 replicas"."""
    batch = plan.per_replica_batch
    if plan.strategy.one_replica_per_worker:
        return f"{plan.global_batch} (each step runs on one worker)"
    if plan.strategy.uses_tpu:
        return f"{batch} × the TPU's cores"
    return f"{plan.global_batch} = {batch} × {plural(plan.total_replicas, 'replica')}"


def gpu_verdict(compute_capability: str) -> str:
    try:
        cc = float(compute_capability)
    except ValueError:
        return "compute capability unknown"
    if cc >= 8.0:
        return f"compute capability {compute_capability}: float16 and bfloat16 are fast"
    if cc >= 7.0:
        return f"compute capability {compute_capability}: float16 is fast, bfloat16 is not"
    return f"compute capability {compute_capability}: keep float32"


def precision_hint(plan: Plan, facts: MachineFacts) -> str:
    """The general rule, then what it means for this plan on this machine."""
    if plan.strategy.uses_tpu:
        return PRECISION_HINT + " On a TPU, mixed_bfloat16 is the fast choice."
    if plan.device_kind != "gpu":
        return (PRECISION_HINT + " This run is on the CPU: keep float32 unless the CPU has "
                "bfloat16 support (e.g. AMX).")
    groups: dict[tuple[str, str], int] = {}
    for gpu in facts.gpus:
        key = (gpu.name, gpu.compute_capability)
        groups[key] = groups.get(key, 0) + 1
    if not groups:
        return PRECISION_HINT
    parts = [f"{count} × {name} ({gpu_verdict(cc)})" if count > 1 else
             f"{name} ({gpu_verdict(cc)})" for (name, cc), count in groups.items()]
    return PRECISION_HINT + " Here: " + "; ".join(parts) + "."


def fixed_replicas_reason(strategy: Strategy, device_kind: str) -> str:
    """Why the replicas per task are fixed at 1 for this choice ('' when the user chooses)."""
    if strategy.one_replica:
        return f"{strategy.title} trains exactly one replica."
    if strategy.one_replica_per_worker:
        return "One replica per worker: add workers for more."
    if strategy.uses_tpu:
        return "The TPU decides: one replica per TPU core."
    if strategy.collective_across_workers and device_kind == "cpu":
        # MultiWorkerMirroredStrategy uses one CPU device per worker, however many logical
        # CPU devices the task makes.
        return "One CPU replica per worker: add workers for more."
    return ""
