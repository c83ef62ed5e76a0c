"""Which tf.distribute strategy to recommend for a machine. The strategies themselves and
every fact about them are the catalogue dtgui.worker.strategies (re-exported here)."""

from __future__ import annotations

from dataclasses import dataclass

from dtgui.core.machines.hardware import MachineFacts
from dtgui.worker.strategies import STRATEGIES, Strategy

__all__ = ["STRATEGIES", "Recommendation", "Strategy", "recommend"]


@dataclass(frozen=True)
class Recommendation:
    strategy: Strategy
    replicas: int
    reason: str


def recommend(facts: MachineFacts) -> Recommendation:
    """Recommend a strategy for one machine from what was detected on it."""
    gpus = facts.usable_gpu_count
    if gpus >= 2:
        return Recommendation(
            Strategy.MIRRORED,
            gpus,
            f"{gpus} GPUs usable by TensorFlow: Mirrored all-reduces across them in one "
            "process, the fastest synchronous choice on one machine.",
        )
    if gpus == 1:
        return Recommendation(
            Strategy.ONE_DEVICE,
            1,
            "One GPU usable by TensorFlow: OneDevice uses it with no distribution overhead.",
        )
    replicas = max(2, min(4, facts.cpu_cores))
    why = "No GPU usable by TensorFlow"
    if facts.gpus and not facts.tf_gpu_count:
        why = f"{len(facts.gpus)} GPU(s) found by the driver but none usable by TensorFlow"
    return Recommendation(
        Strategy.MIRRORED,
        replicas,
        f"{why}: Mirrored over {replicas} logical CPU devices trains {replicas} replicas "
        "side by side, the same code path a multi-GPU machine runs.",
    )
