"""Validating a training plan: every reason the wizard's choices cannot run, as sentences.

The plan itself (`Plan`, `TaskSpec`, its model and option sets, plan.json) is
dtgui.worker.plan, which every bundle carries; it is re-exported here for the rest of the app.
"""

from __future__ import annotations

import re

from dtgui.worker.call_size import StepsPerCall
from dtgui.worker.plan import (
    COMMUNICATIONS,
    DEVICE_KINDS,
    GRAD_COMPRESSIONS,
    LOCAL_HOST,
    LOCAL_MACHINE,
    LR_SCHEDULES,
    OPTIMIZERS,
    PLAN_NAME,
    PRECISIONS,
    SCHEMA,
    Communication,
    DemoModel,
    DeviceKind,
    GradCompression,
    LrSchedule,
    MachineAccess,
    MetricsTasks,
    ModelFile,
    Optimizer,
    Plan,
    PlanError,
    PlanModel,
    Precision,
    ScriptModel,
    TaskSpec,
    is_local_machine,
)
from dtgui.worker.strategies import STRATEGIES, Strategy

__all__ = ["COMMUNICATIONS", "DEVICE_KINDS", "GRAD_COMPRESSIONS", "LOCAL_HOST", "LOCAL_MACHINE",
           "LR_SCHEDULES", "MAX_ACCUMULATION", "MAX_BYTES_PER_PACK", "MAX_REPLICAS", "MAX_STEPS_PER_CALL", "OPTIMIZERS", "PLAN_NAME",
           "PRECISIONS", "SCHEMA", "Communication", "DemoModel", "DeviceKind", "GradCompression", "LrSchedule",
           "MachineAccess", "MetricsTasks", "ModelFile", "Optimizer", "Plan", "PlanError",
           "PlanModel", "Precision", "ScriptModel", "TaskSpec", "is_local_machine", "validate"]

MAX_REPLICAS = 64
MAX_STEPS_PER_CALL = StepsPerCall.MAX_STEPS  # the training program's own limit
MAX_ACCUMULATION = 64  # micro-batches per update (unrolled in the step's graph)
MAX_BYTES_PER_PACK = 2**31 - 1  # CommunicationOptions takes an int32's worth
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_optimizer(plan: Plan, errors: list[str]) -> None:
    """The optimizer, schedule, clipping, accumulation and validation fields."""
    if plan.optimizer not in OPTIMIZERS:
        errors.append(f"Optimizer must be one of {', '.join(OPTIMIZERS)}.")
    if plan.lr_schedule not in LR_SCHEDULES:
        errors.append(f"Learning-rate schedule must be one of {', '.join(LR_SCHEDULES)}.")
    if not _is_number(plan.weight_decay) or not 0 <= plan.weight_decay <= 1:
        errors.append("Weight decay must be a number from 0 to 1 (e.g. 0.01; 0 = none).")
    if not _is_number(plan.momentum) or not 0 <= plan.momentum < 1:
        errors.append("Momentum must be a number from 0 up to (not including) 1 (e.g. 0.9).")
    if not _is_number(plan.clip_norm) or not 0 <= plan.clip_norm <= 1e6:
        errors.append("Gradient clipping must be a global norm of 0 (off) or more (e.g. 1.0).")
    if not _is_number(plan.lr_step_factor) or not 0 < plan.lr_step_factor <= 1:
        errors.append("Step decay factor must be above 0 and at most 1 (e.g. 0.1).")
    _check_int(errors, "Warm-up steps", plan.warmup_steps, 0, 10_000_000)
    _check_int(errors, "Step decay interval", plan.lr_step_every, 1, 10_000_000)
    _check_int(errors, "Gradient accumulation", plan.grad_accumulation, 1, MAX_ACCUMULATION)
    _check_int(errors, "Validation interval", plan.validate_every, 0, 10_000_000)
    if plan.lr_schedule == "warmup_cosine" and isinstance(plan.warmup_steps, int) \
            and isinstance(plan.steps, int) and plan.warmup_steps >= plan.steps:
        errors.append("Warm-up steps must be fewer than the steps: the cosine decay follows them.")


def validate(plan: Plan, *, usable_gpus: int | None = None) -> list[str]:
    """Every reason this plan cannot run, as sentences that say what to change."""
    errors: list[str] = []
    strategy = Strategy.named(plan.strategy)
    if strategy is None:
        return [f"Unknown strategy {plan.strategy!r}: choose one of {', '.join(STRATEGIES)}."]
    if not _RUN_NAME.fullmatch(plan.run_name):
        errors.append(
            "Run name: use 1-80 letters, digits, '.', '_' or '-', starting with a letter or digit."
        )
    if plan.device_kind not in DEVICE_KINDS:
        errors.append(f"Device kind must be one of {DEVICE_KINDS}.")
    if plan.precision not in PRECISIONS:
        errors.append(f"Precision must be one of {PRECISIONS}.")
    if plan.communication not in COMMUNICATIONS:
        errors.append(f"Communication must be one of {COMMUNICATIONS}.")
    _check_int(errors, "Replicas per task", plan.replicas_per_task, 1, MAX_REPLICAS)
    _check_int(errors, "Per-replica batch size", plan.per_replica_batch, 1, 65536)
    _check_int(errors, "Steps", plan.steps, 1, 10_000_000)
    _check_int(errors, "Steps per epoch", plan.steps_per_epoch, 1, 10_000_000)
    _check_int(errors, "Checkpoint interval", plan.checkpoint_every, 0, 10_000_000)
    _check_int(errors, "Log interval", plan.log_every, 1, 100_000)
    _check_int(errors, "Steps per call", plan.steps_per_call, 0, MAX_STEPS_PER_CALL)
    _check_int(errors, "Seed", plan.seed, 0, 2**31 - 1)
    if not isinstance(plan.learning_rate, (int, float)) or not 0 < plan.learning_rate <= 10:
        errors.append("Learning rate must be a number above 0 and at most 10 (e.g. 0.001).")
    _check_optimizer(plan, errors)
    if errors:
        return errors  # the checks below compare these numbers

    if strategy.one_replica and plan.replicas_per_task != 1:
        errors.append(f"{strategy.title} trains exactly one replica: set replicas to 1.")
    if strategy.multi_process:
        _check_int(errors, "Workers", plan.workers, 1, 64)
    if strategy.collective_across_workers and not plan.on_gpu and plan.replicas_per_task != 1:
        errors.append(
            f"{strategy.title} on CPU runs one replica per worker process (TensorFlow's "
            "collectives use one CPU device per worker): set replicas to 1 and add workers."
        )
    if "ps" in strategy.task_types:
        _check_int(errors, "Parameter servers", plan.parameter_servers, 1, 16)
    if strategy.uses_tpu and not plan.tpu_address.strip():
        errors.append("TPU needs an address (grpc://HOST:PORT or a TPU name).")
    if plan.communication == "nccl":
        if plan.device_kind != "gpu":
            errors.append("NCCL communication needs GPUs: choose auto or ring on CPU.")
        if not strategy.supports_communication:
            errors.append(f"{strategy.title} has no collective communication option: use auto.")
    errors += all_reduce_lever_problems(plan, strategy)
    if plan.precision == "mixed_float16" and not plan.on_gpu and strategy.uses_tpu:
        errors.append("TPUs use bfloat16: choose mixed_bfloat16.")
    if plan.xla and not strategy.supports_xla:
        errors.append(f"XLA is not supported with {strategy.title} in dtgui: turn XLA off.")
    errors += _profile_problems(plan)
    if plan.on_gpu and usable_gpus is not None:
        need = strategy.gpus_per_task(plan.replicas_per_task)
        if not strategy.multi_process and need > usable_gpus:
            errors.append(
                f"This plan needs {need} GPU(s) but TensorFlow can use {usable_gpus} here: "
                "lower the replicas or train on CPU."
            )
    errors += _placement_problems(plan)
    model = plan.model
    if isinstance(model, ScriptModel):  # a user's own training script (dtgui.core.scripts.script)
        from dtgui.core.scripts.script import script_problems

        errors += script_problems(model)
    elif isinstance(model, ModelFile) and not model.path:
        errors.append("Choose your model file (a .py defining build_model and make_dataset).")
    return errors


def all_reduce_lever_problems(plan: Plan, strategy: Strategy) -> list[str]:
    """Why the plan's all-reduce levers (compressed gradients, pack size) cannot apply."""
    problems: list[str] = []
    if plan.grad_compression not in GRAD_COMPRESSIONS:
        return [f"Gradient compression must be one of {', '.join(GRAD_COMPRESSIONS)}."]
    _check_int(problems, "Pack size", plan.bytes_per_pack, 0, MAX_BYTES_PER_PACK)
    if problems:
        return problems
    compress = plan.grad_compression != GradCompression.NONE
    if not compress and not plan.bytes_per_pack:
        return []
    if isinstance(plan.model, ScriptModel):
        return ["Your own script does its own all-reduce: dtgui cannot compress it nor size "
                "its packs (set them in the script: the doctor's advice says which)."]
    if not strategy.all_reduces_gradients:
        return [f"{strategy.no_levers_reason()} Set gradient compression to none and the pack "
                "size to 0."]
    if plan.bytes_per_pack and not strategy.packs_all_reduce:
        problems.append(f"{strategy.title} does not split its all-reduce into packs (only "
                        "MultiWorkerMirrored's collective does): set the pack size to 0.")
    return problems


def _check_int(errors: list[str], name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        errors.append(f"{name} must be a whole number.")
    elif not low <= value <= high:
        errors.append(f"{name} must be between {low} and {high} (it is {value}).")


def _placement_problems(plan: Plan) -> list[str]:
    """A plan placed on several machines must use addresses they can all reach."""
    problems = []
    if plan.is_multi_machine:
        for task in plan.tasks:
            if task.port and (task.host.startswith("127.") or task.host in ("localhost", "::1")):
                problems.append(
                    f"Task {task.task_id} on {task.machine_name} uses the address {task.host}, "
                    "which the other machines cannot reach: give the machine's network address."
                )
    if plan.on_gpu and plan.strategy.collective_across_workers:
        for task in plan.tasks:
            if task.gpus and len(task.gpus) != plan.replicas_per_task:
                problems.append(
                    f"{plan.strategy.title} needs the same number of GPUs on every worker: "
                    f"{task.task_id} on {task.machine_name} has {len(task.gpus)}, the plan "
                    f"{plan.replicas_per_task}."
                )
    return problems


def _profile_problems(plan: Plan) -> list[str]:
    """What keeps the plan's profile capture (profile_steps) from being made."""
    first, last = plan.profile_steps
    if (first, last) == (0, 0):
        return []
    if not 1 <= first <= last <= plan.steps:
        return [f"Profile steps {first}-{last}: give FIRST-LAST within the run's steps "
                f"(1-{plan.steps}), the first not after the last."]
    refusal = profile_refusal(plan)
    return [f"Profile steps: {refusal}; leave them out."] if refusal else []


def profile_refusal(plan: Plan) -> str:
    """Why dtgui captures no profile of this plan's run ("" when it does): the plan's profile
    steps and a profile asked of the running run alike."""
    if plan.script is not None:
        return ("a script's steps are its own: start TensorFlow's profiler in it "
                "(docs/own-scripts.md)")
    return ""
