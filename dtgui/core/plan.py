"""A training plan: every choice the wizard makes, validated, and frozen to plan.json."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from dtgui.core.strategies import STRATEGIES
from dtgui.worker.call_size import StepsPerCall

SCHEMA = 1
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
COMMUNICATIONS = ("auto", "ring", "nccl")
DEVICE_KINDS = ("cpu", "gpu")
MAX_REPLICAS = 64
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
LOCAL_MACHINE = "local"  # the machine name of "this machine" in a placed plan


def is_local_machine(name: str) -> bool:
    """True for this machine ("" or "local"); any other name is a registered machine."""
    return name in ("", LOCAL_MACHINE)


class PlanError(ValueError):
    """A plan that cannot run; the message says what to change."""


@dataclass(frozen=True)
class TaskSpec:
    type: str  # worker | chief | ps
    index: int
    host: str = "127.0.0.1"
    port: int = 0
    gpus: tuple[int, ...] = ()
    machine: str = ""  # "" / "local" = this machine, else a registered machine's name

    @property
    def is_local(self) -> bool:
        return is_local_machine(self.machine)

    @property
    def machine_name(self) -> str:
        """The machine's name, "local" for this machine."""
        return LOCAL_MACHINE if self.is_local else self.machine

    @property
    def task_id(self) -> str:
        return f"{self.type}:{self.index}"

    @property
    def file_stem(self) -> str:
        return f"{self.type}-{self.index}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


MAX_STEPS_PER_CALL = StepsPerCall.MAX_STEPS  # the training program's own limit
OPTIMIZERS = ("adam", "adamw", "sgd", "rmsprop")
LR_SCHEDULES = ("constant", "cosine", "warmup_cosine", "step")
MAX_ACCUMULATION = 64  # micro-batches per update (unrolled in the step's graph)


@dataclass(frozen=True)
class Plan:
    run_name: str = "run"
    strategy: str = "mirrored"
    device_kind: str = "cpu"
    replicas_per_task: int = 2
    workers: int = 1  # worker tasks (multi_worker_mirrored, parameter_server)
    parameter_servers: int = 0  # ps tasks (parameter_server)
    precision: str = "float32"
    xla: bool = False
    communication: str = "auto"
    per_replica_batch: int = 32
    steps: int = 100
    steps_per_epoch: int = 25
    learning_rate: float = 0.001
    seed: int = 42
    deterministic: bool = True
    checkpoint_every: int = 50
    log_every: int = 1
    steps_per_call: int = 0  # training steps per call to the device; 0: chosen while training
    # the optimizer and its schedule (a model file's make_optimizer() replaces them)
    optimizer: str = "adam"
    weight_decay: float = 0.0  # decoupled weight decay (AdamW, SGD, RMSprop)
    momentum: float = 0.9  # SGD
    lr_schedule: str = "constant"
    warmup_steps: int = 0  # warmup_cosine: linear from 0 to the learning rate
    lr_step_every: int = 1000  # step: multiply the learning rate by lr_step_factor every N
    lr_step_factor: float = 0.1
    clip_norm: float = 0.0  # clip the global gradient norm (0: off)
    grad_accumulation: int = 1  # micro-batches per update (1: off)
    validate_every: int = 0  # steps between validations; 0: at the end of every epoch
    save_best: bool = False  # also keep the model at its best validation loss
    model: dict[str, Any] = field(default_factory=lambda: {"kind": "demo"})
    tpu_address: str = ""
    cluster: dict[str, list[str]] = field(default_factory=dict)
    tasks: tuple[TaskSpec, ...] = ()
    # machine name -> {"address": reachable address, "login": "user@host:port",
    # "python": interpreter, "jump": an `ssh -J` argument when it goes through a jump host};
    # empty when every task runs on this machine.
    machines: dict[str, dict[str, str]] = field(default_factory=dict)

    # -- derived facts ------------------------------------------------------------------
    @property
    def compute_tasks(self) -> int:
        """Tasks that hold replicas (the coordinator and parameter servers hold none)."""
        if self.strategy in ("multi_worker_mirrored", "parameter_server"):
            return self.workers
        return 1

    @property
    def total_replicas(self) -> int:
        if self.strategy == "one_device":
            return 1
        if self.strategy == "parameter_server":
            return self.workers
        return self.compute_tasks * self.replicas_per_task

    @property
    def global_batch(self) -> int:
        if self.strategy == "parameter_server":
            return self.per_replica_batch
        return self.per_replica_batch * self.total_replicas

    @property
    def examples_per_update(self) -> int:
        """Examples behind one optimizer update (the global batch x accumulated micro-batches)."""
        return self.global_batch * max(1, self.grad_accumulation)

    @property
    def machine_names(self) -> list[str]:
        """The machines the tasks are placed on, in task order ("local" = this machine)."""
        return list(dict.fromkeys(t.machine_name for t in self.tasks))

    @property
    def is_multi_machine(self) -> bool:
        return len(self.machine_names) > 1

    def with_changes(self, **changes: Any) -> Plan:
        return replace(self, **changes)

    # -- JSON -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["tasks"] = [
            {"type": t.type, "index": t.index, "host": t.host, "port": t.port, "gpus": list(t.gpus),
             "machine": t.machine}
            for t in self.tasks
        ]
        return {"schema": SCHEMA, **data}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        if data.get("schema") != SCHEMA:
            raise PlanError(f"plan schema {data.get('schema')!r} is not {SCHEMA}; re-export it")
        known = {f for f in cls.__dataclass_fields__}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["tasks"] = tuple(
            TaskSpec(t["type"], int(t["index"]), t.get("host", "127.0.0.1"), int(t.get("port", 0)),
                     tuple(t.get("gpus", ())), str(t.get("machine", "")))
            for t in data.get("tasks", ())
        )
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise PlanError(f"plan.json does not fit schema {SCHEMA}: {exc}") from exc


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_optimizer(plan: Plan, errors: list[str]) -> None:
    """The optimizer, schedule, clipping, accumulation and validation fields."""
    if plan.optimizer not in OPTIMIZERS:
        errors.append(f"Optimizer must be one of {', '.join(OPTIMIZERS)}.")
    if plan.lr_schedule not in LR_SCHEDULES:
        errors.append(f"Learning-rate schedule must be one of {', '.join(LR_SCHEDULES)}.")
    if not _number(plan.weight_decay) or not 0 <= plan.weight_decay <= 1:
        errors.append("Weight decay must be a number from 0 to 1 (e.g. 0.01; 0 = none).")
    if not _number(plan.momentum) or not 0 <= plan.momentum < 1:
        errors.append("Momentum must be a number from 0 up to (not including) 1 (e.g. 0.9).")
    if not _number(plan.clip_norm) or not 0 <= plan.clip_norm <= 1e6:
        errors.append("Gradient clipping must be a global norm of 0 (off) or more (e.g. 1.0).")
    if not _number(plan.lr_step_factor) or not 0 < plan.lr_step_factor <= 1:
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
    info = STRATEGIES.get(plan.strategy)
    if info is None:
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

    if plan.strategy == "one_device" and plan.replicas_per_task != 1:
        errors.append("OneDevice trains exactly one replica: set replicas to 1.")
    if plan.strategy == "multi_worker_mirrored":
        _check_int(errors, "Workers", plan.workers, 1, 64)
        if plan.device_kind == "cpu" and plan.replicas_per_task != 1:
            errors.append(
                "MultiWorkerMirrored on CPU runs one replica per worker process (TensorFlow's "
                "collectives use one CPU device per worker): set replicas to 1 and add workers."
            )
    if plan.strategy == "parameter_server":
        _check_int(errors, "Workers", plan.workers, 1, 64)
        _check_int(errors, "Parameter servers", plan.parameter_servers, 1, 16)
    if plan.strategy == "tpu" and not plan.tpu_address.strip():
        errors.append("TPU needs an address (grpc://HOST:PORT or a TPU name).")
    if plan.communication == "nccl":
        if plan.device_kind != "gpu":
            errors.append("NCCL communication needs GPUs: choose auto or ring on CPU.")
        if not info.supports_communication:
            errors.append(f"{info.title} has no collective communication option: use auto.")
    if plan.precision == "mixed_float16" and plan.device_kind == "cpu" and plan.strategy == "tpu":
        errors.append("TPUs use bfloat16: choose mixed_bfloat16.")
    if plan.xla and plan.strategy == "parameter_server":
        errors.append("XLA is not supported with ParameterServer in dtgui: turn XLA off.")
    if plan.device_kind == "gpu" and usable_gpus is not None:
        need = plan.replicas_per_task if plan.strategy != "one_device" else 1
        if plan.strategy not in ("multi_worker_mirrored", "parameter_server") and need > usable_gpus:
            errors.append(
                f"This plan needs {need} GPU(s) but TensorFlow can use {usable_gpus} here: "
                "lower the replicas or train on CPU."
            )
    errors += _placement_problems(plan)
    model_kind = plan.model.get("kind")
    if model_kind == "script":  # a user's own training script (dtgui.core.script)
        from dtgui.core.script import script_problems

        errors += script_problems(plan.model)
    elif model_kind not in ("demo", "file"):
        errors.append("Model must be the built-in demo, your own Python file or your own "
                      "training script.")
    elif model_kind == "file" and not plan.model.get("path"):
        errors.append("Choose your model file (a .py defining build_model and make_dataset).")
    return errors


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
    if plan.device_kind == "gpu" and plan.strategy == "multi_worker_mirrored":
        for task in plan.tasks:
            if task.gpus and len(task.gpus) != plan.replicas_per_task:
                problems.append(
                    f"MultiWorkerMirrored needs the same number of GPUs on every worker: "
                    f"{task.task_id} on {task.machine_name} has {len(task.gpus)}, the plan "
                    f"{plan.replicas_per_task}."
                )
    return problems
