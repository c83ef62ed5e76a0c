"""The catalogue of tf.distribute strategies dtgui offers, and which one to recommend."""

from __future__ import annotations

from dataclasses import dataclass

from dtgui.core.hardware import MachineFacts


@dataclass(frozen=True)
class StrategyInfo:
    key: str
    title: str
    summary: str
    multi_process: bool
    supports_communication: bool
    supports_mixed_float16_on_cpu: bool = True


STRATEGIES: dict[str, StrategyInfo] = {
    s.key: s
    for s in (
        StrategyInfo(
            "one_device",
            "OneDevice",
            "Trains on a single device (one GPU, or the CPU). The baseline: no distribution "
            "overhead, and the simplest to debug.",
            multi_process=False,
            supports_communication=False,
        ),
        StrategyInfo(
            "mirrored",
            "Mirrored",
            "Synchronous data parallelism on one machine: every device (GPU, or logical CPU "
            "device) holds a copy of the model and gradients are all-reduced each step.",
            multi_process=False,
            supports_communication=True,
        ),
        StrategyInfo(
            "central_storage",
            "CentralStorage",
            "Synchronous data parallelism on one machine with the variables kept on the CPU "
            "and the computation replicated across devices. Useful when GPU memory is tight.",
            multi_process=False,
            supports_communication=False,
        ),
        StrategyInfo(
            "multi_worker_mirrored",
            "MultiWorkerMirrored",
            "Synchronous data parallelism across several worker processes (here: processes on "
            "this machine talking over 127.0.0.1). Each worker mirrors the model on its local "
            "devices; gradients are all-reduced across all of them.",
            multi_process=True,
            supports_communication=True,
        ),
        StrategyInfo(
            "parameter_server",
            "ParameterServer",
            "Asynchronous training: a coordinator dispatches steps to workers, variables live on "
            "parameter servers. Tolerates slow workers; losses are reported per step by the "
            "coordinator.",
            multi_process=True,
            supports_communication=False,
        ),
        StrategyInfo(
            "tpu",
            "TPU",
            "Trains on a Cloud TPU reached at a grpc:// address. dtgui checks that the address "
            "answers before launching and never waits on it for more than a few seconds.",
            multi_process=False,
            supports_communication=False,
        ),
    )
}


@dataclass(frozen=True)
class Recommendation:
    strategy: str
    replicas: int
    reason: str


def recommend(facts: MachineFacts) -> Recommendation:
    """Recommend a strategy for one machine from what was detected on it."""
    gpus = facts.usable_gpu_count
    if gpus >= 2:
        return Recommendation(
            "mirrored",
            gpus,
            f"{gpus} GPUs usable by TensorFlow: Mirrored all-reduces across them in one "
            "process, the fastest synchronous choice on one machine.",
        )
    if gpus == 1:
        return Recommendation(
            "one_device",
            1,
            "One GPU usable by TensorFlow: OneDevice uses it with no distribution overhead.",
        )
    replicas = max(2, min(4, facts.cpu_cores))
    why = "No GPU usable by TensorFlow"
    if facts.gpus and not facts.tf_gpu_count:
        why = f"{len(facts.gpus)} GPU(s) found by the driver but none usable by TensorFlow"
    return Recommendation(
        "mirrored",
        replicas,
        f"{why}: Mirrored over {replicas} logical CPU devices trains {replicas} replicas "
        "side by side, the same code path a multi-GPU machine runs.",
    )
