"""The training plan (plan.json): one typed value that the app writes and every task reads.

The GUI process builds and validates it (dtgui.core.plans.plan adds the validation); a task of a
bundle reads it back with `Plan.load`. Defaults live here only. No TensorFlow: the GUI
process and every bundle share this module.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .plan_model import (
    BUNDLE_PROJECT_DIR,
    DEMO_KIND,
    FILE_KIND,
    SCRIPT_KIND,
    DemoModel,
    ModelFile,
    PlanModel,
    ScriptModel,
    model_from_dict,
)
from .plan_options import (
    Choice,
    Communication,
    DeviceKind,
    GradCompression,
    LrSchedule,
    MetricsTasks,
    Optimizer,
    PlanError,
    Precision,
    choice_of,
    refuse_unknown,
)
from .strategies import STRATEGIES, Strategy

__all__ = ["BUNDLE_PROJECT_DIR", "COMMUNICATIONS", "DEMO_KIND", "DEVICE_KINDS", "FILE_KIND",
           "GRAD_COMPRESSIONS", "LOCAL_HOST", "LOCAL_MACHINE", "LR_SCHEDULES", "OPTIMIZERS",
           "PLAN_NAME", "PRECISIONS", "SCHEMA", "SCRIPT_KIND", "Communication", "DemoModel",
           "DeviceKind", "GradCompression", "LrSchedule", "MachineAccess", "MetricsTasks",
           "ModelFile", "Optimizer", "Plan", "PlanError", "PlanModel", "Precision",
           "ScriptModel", "TaskSpec", "is_local_machine"]

SCHEMA = 1
PLAN_NAME = "plan.json"  # its file in a bundle
LOCAL_MACHINE = "local"  # the machine name of "this machine" in a placed plan
LOCAL_HOST = "127.0.0.1"
# The names of each option set (for choosers and messages).
PRECISIONS = Precision.names()
COMMUNICATIONS = Communication.names()
DEVICE_KINDS = DeviceKind.names()
OPTIMIZERS = Optimizer.names()
LR_SCHEDULES = LrSchedule.names()
GRAD_COMPRESSIONS = GradCompression.names()
# The plan's fields that take one of an option set, and the set.
_CHOICES: dict[str, type[Choice]] = {
    "device_kind": DeviceKind, "precision": Precision,
    "communication": Communication, "optimizer": Optimizer, "lr_schedule": LrSchedule,
    "grad_compression": GradCompression}

# fields left out of plan.json at their defaults (the all-reduce's levers)
_WRITTEN_WHEN_SET = ("grad_compression", "bytes_per_pack")


def is_local_machine(name: str) -> bool:
    """True for this machine ("" or "local"); any other name is a registered machine."""
    return name in ("", LOCAL_MACHINE)


@dataclass(frozen=True)
class TaskSpec:
    type: str  # worker | chief | ps
    index: int
    host: str = LOCAL_HOST
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

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "index": self.index, "host": self.host, "port": self.port,
                "gpus": list(self.gpus), "machine": self.machine}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskSpec:
        refuse_unknown(data, (f.name for f in fields(cls)), "a task's ")
        return cls(data["type"], int(data["index"]), data.get("host", LOCAL_HOST),
                   int(data.get("port", 0)), tuple(data.get("gpus", ())),
                   str(data.get("machine", "")))


@dataclass(frozen=True)
class MachineAccess:
    """How a placed plan's machine is reached (this machine, when listed, has an address
    only)."""

    address: str = ""  # the address the other machines reach it at
    login: str = ""  # user@host:port
    python: str = ""  # its interpreter
    jump: str = ""  # an `ssh -J` argument when it goes through a jump host

    @classmethod
    def from_dict(cls, data: object, where: str = "") -> MachineAccess:
        if not isinstance(data, Mapping):
            raise PlanError(f"plan.json: machines[{where!r}] is not an object: re-export the "
                            "plan.")
        refuse_unknown(data, (f.name for f in fields(cls)), f"machines[{where!r}].")
        return cls(**{k: str(v) for k, v in data.items()})


@dataclass(frozen=True)
class Plan:
    run_name: str = "run"
    # A `Strategy` and the option sets below: a constructor given a name that is none keeps
    # it as a str so that validation can say so; plan.json with such a name is refused.
    strategy: Strategy = Strategy.MIRRORED
    device_kind: DeviceKind = DeviceKind.CPU
    replicas_per_task: int = 2
    workers: int = 1  # worker tasks (multi-process strategies)
    parameter_servers: int = 0  # ps tasks (parameter_server)
    precision: Precision = Precision.FLOAT32
    xla: bool = False
    communication: Communication = Communication.AUTO
    # the all-reduce's levers (strategies that all-reduce in dtgui's loop): the dtype the
    # gradients cross the network in, and the size of each collective pack (0: TensorFlow's)
    grad_compression: GradCompression = GradCompression.NONE
    bytes_per_pack: int = 0
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
    optimizer: Optimizer = Optimizer.ADAM
    weight_decay: float = 0.0  # decoupled weight decay (AdamW, SGD, RMSprop)
    momentum: float = 0.9  # SGD
    lr_schedule: LrSchedule = LrSchedule.CONSTANT
    warmup_steps: int = 0  # warmup_cosine: linear from 0 to the learning rate
    lr_step_every: int = 1000  # step: multiply the learning rate by lr_step_factor every N
    lr_step_factor: float = 0.1
    clip_norm: float = 0.0  # clip the global gradient norm (0: off)
    grad_accumulation: int = 1  # micro-batches per update (1: off)
    validate_every: int = 0  # steps between validations; 0: at the end of every epoch
    save_best: bool = False  # also keep the model at its best validation loss
    # TensorFlow's profiler on every task from the first to the last step given, both
    # included (0, 0: none); a trace a task under output/tensorboard/<task>/plugins/profile/
    profile_steps: tuple[int, int] = (0, 0)
    model: PlanModel = field(default_factory=DemoModel)
    tpu_address: str = ""
    cluster: dict[str, list[str]] = field(default_factory=dict)
    tasks: tuple[TaskSpec, ...] = ()
    # machine name -> how it is reached; empty when every task runs on this machine
    machines: dict[str, MachineAccess] = field(default_factory=dict)

    def __post_init__(self) -> None:
        known = Strategy.named(self.strategy)
        if known is not None and self.strategy is not known:
            object.__setattr__(self, "strategy", known)
        for name, kind in _CHOICES.items():
            value = getattr(self, name)
            member = kind.named(value)
            if member is not None and value is not member:
                object.__setattr__(self, name, member)
        if not isinstance(self.model, (DemoModel, ModelFile, ScriptModel)):
            raise TypeError(f"Plan.model is a {type(self.model).__name__}: give a DemoModel, "
                            "ModelFile or ScriptModel (plan.json's form is read by from_dict)")

    # -- derived facts ------------------------------------------------------------------
    @property
    def compute_tasks(self) -> int:
        """Tasks that hold replicas (the coordinator and parameter servers hold none)."""
        return self.workers if self.strategy.multi_process else 1

    @property
    def total_replicas(self) -> int:
        if self.strategy.one_replica:
            return 1
        if self.strategy.one_replica_per_worker:
            return self.workers
        return self.compute_tasks * self.replicas_per_task

    @property
    def global_batch(self) -> int:
        """The examples of one step: every replica's batch (one worker's when each worker
        steps on its own)."""
        if self.strategy.one_replica_per_worker:
            return self.per_replica_batch
        return self.per_replica_batch * self.total_replicas

    @property
    def examples_per_update(self) -> int:
        """Examples behind one optimizer update (the global batch x accumulated micro-batches)."""
        return self.global_batch * self.micro_batches

    @property
    def micro_batches(self) -> int:
        """Micro-batches per optimizer update (1: no accumulation)."""
        return max(1, self.grad_accumulation)

    @property
    def validation_interval(self) -> int:
        """Steps between validations (the epoch when the plan leaves it open)."""
        return self.validate_every or self.steps_per_epoch

    @property
    def profiled(self) -> bool:
        """The plan captures TensorFlow's profiler over some of its steps."""
        return self.profile_steps[1] > 0

    @property
    def on_gpu(self) -> bool:
        return self.device_kind == "gpu"

    @property
    def model_kind(self) -> str:
        """DEMO_KIND, FILE_KIND or SCRIPT_KIND (for messages: code asks `isinstance`)."""
        return self.model.kind

    @property
    def model_file(self) -> ModelFile | None:
        """The user's model file, None for another kind of model."""
        return self.model if isinstance(self.model, ModelFile) else None

    @property
    def script(self) -> ScriptModel | None:
        """The user's own training script, None for another kind of model."""
        return self.model if isinstance(self.model, ScriptModel) else None

    def machine(self, name: str) -> MachineAccess:
        """How machine `name` is reached (empty facts for one the plan does not list)."""
        return self.machines.get(name) or MachineAccess()

    @property
    def worker_tasks(self) -> list[TaskSpec]:
        return [t for t in self.tasks if t.type == "worker"]

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
        data: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("strategy", *_CHOICES):
            data[name] = str(data[name])
        data["model"] = self.model.to_dict()
        if self.profiled:
            data["profile_steps"] = list(self.profile_steps)
        else:  # a plan that profiles nothing is written as before the field (older dtgui reads it)
            del data["profile_steps"]
        data["cluster"] = {k: list(v) for k, v in self.cluster.items()}
        data["tasks"] = [t.to_dict() for t in self.tasks]
        data["machines"] = {name: {k: v for k, v in vars(m).items() if v}
                            for name, m in self.machines.items()}
        # written only when set: a plan without them reads in a dtgui from before they
        # existed, and one with them is refused there by name (rather than trained otherwise)
        for name in _WRITTEN_WHEN_SET:
            if data[name] == getattr(Plan, name):
                del data[name]
        return {"schema": SCHEMA, **data}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, data: object) -> Plan:
        """A plan from its JSON form, read once into its types. Fields a file leaves out take
        the defaults above (files from before a field existed); a field this version does not
        know, an unknown strategy or option, or a model of no known kind is a PlanError that
        names it."""
        if not isinstance(data, dict):
            raise PlanError("plan.json does not hold a JSON object")
        if data.get("schema") != SCHEMA:
            raise PlanError(f"plan schema {data.get('schema')!r} is not {SCHEMA}; re-export it")
        refuse_unknown(data, ["schema", *(f.name for f in fields(cls))], "")
        kwargs = {k: v for k, v in data.items() if k != "schema"}
        if "strategy" in data and Strategy.named(data["strategy"]) is None:
            raise PlanError(f"plan.json: strategy is {data['strategy']!r}, which is not one of "
                            f"{', '.join(STRATEGIES)}: set one of them or re-export the plan.")
        for name, kind in _CHOICES.items():
            if name in data:
                kwargs[name] = choice_of(kind, data[name], name)
        if "model" in data:
            kwargs["model"] = model_from_dict(data["model"])
        if "profile_steps" in data:
            kwargs["profile_steps"] = _step_span(data["profile_steps"])
        machines = data.get("machines") or {}
        if not isinstance(machines, dict):
            raise PlanError("plan.json: machines is not an object: re-export the plan.")
        kwargs["machines"] = {str(name): MachineAccess.from_dict(info, str(name))
                              for name, info in machines.items()}
        try:
            kwargs["tasks"] = tuple(TaskSpec.from_dict(t) for t in data.get("tasks", ()))
            return cls(**kwargs)
        except (TypeError, KeyError, ValueError, AttributeError) as exc:
            raise PlanError(f"plan.json does not fit schema {SCHEMA}: {exc}") from exc

    @classmethod
    def load(cls, path: str) -> Plan:
        """Read plan.json; PlanError says what is wrong with the file."""
        if not os.path.isfile(path):
            raise PlanError(f"plan.json not found: {os.path.abspath(path)}")
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except json.JSONDecodeError as exc:
            raise PlanError(f"plan.json is not valid JSON: {exc}") from exc
        except OSError as exc:
            raise PlanError(f"plan.json cannot be read: {exc}") from exc
        return cls.from_dict(data)


def _step_span(value: object) -> tuple[int, int]:
    """plan.json's [first, last] steps (PlanError when it is not two whole numbers)."""
    if isinstance(value, (list, tuple)) and len(value) == 2 \
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return int(value[0]), int(value[1])
    raise PlanError(f"plan.json: profile_steps is {value!r}, not [first, last]: re-export "
                    "the plan.")
