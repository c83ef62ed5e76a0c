"""The training plan (plan.json): one typed value that the app writes and every task reads.

The GUI process builds and validates it (dtgui.core.plan adds the validation); a task of a
bundle reads it back with `Plan.load`. Defaults live here only. No TensorFlow: the GUI
process and every bundle share this module.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from .strategies import Strategy

SCHEMA = 1
PLAN_NAME = "plan.json"  # its file in a bundle
LOCAL_MACHINE = "local"  # the machine name of "this machine" in a placed plan
LOCAL_HOST = "127.0.0.1"
# The choices of the plan's fields that take one of a few names.
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
COMMUNICATIONS = ("auto", "ring", "nccl")
DEVICE_KINDS = ("cpu", "gpu")
OPTIMIZERS = ("adam", "adamw", "sgd", "rmsprop")
LR_SCHEDULES = ("constant", "cosine", "warmup_cosine", "step")


def is_local_machine(name: str) -> bool:
    """True for this machine ("" or "local"); any other name is a registered machine."""
    return name in ("", LOCAL_MACHINE)


# The model kinds: the built-in demo, a user's model file, a user's own training script.
DEMO_KIND, FILE_KIND, SCRIPT_KIND = "demo", "file", "script"
BUNDLE_PROJECT_DIR = "project"  # a bundle's copy of the user's project folder


class PlanError(ValueError):
    """A plan that cannot run, or a plan.json that cannot be read; the message says what to
    change."""


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
        return cls(data["type"], int(data["index"]), data.get("host", LOCAL_HOST),
                   int(data.get("port", 0)), tuple(data.get("gpus", ())),
                   str(data.get("machine", "")))


@dataclass(frozen=True)
class ModelFile:
    """A user's model file (build_model, make_dataset ...): plan.json's model of kind "file".
    In a bundle `path` is relative to the bundle and `project` the folder put on sys.path."""

    path: str
    project: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelFile:
        return cls(path=str(data.get("path") or ""), project=str(data.get("project") or ""))


@dataclass(frozen=True)
class ScriptModel:
    """A user's own training script: plan.json's model of kind "script". Before the bundle is
    written `project` is the user's folder (absolute); in a bundle it is BUNDLE_PROJECT_DIR."""

    project: str
    entry: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    legacy_keras: bool = False
    data_dir: str = ""  # data kept on each machine at this path (DTGUI_DATASET_DIR); "" = none
    # metrics from the lines it prints (printed_metrics.py): the built-in reading, the user's
    # patterns (regular expressions with named groups), and which tasks: "chief" (the main
    # task) or "all"
    printed_metrics: bool = True
    patterns: tuple[str, ...] = ()
    metrics_tasks: str = "chief"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": SCRIPT_KIND, "project": self.project, "entry": self.entry,
                "args": list(self.args), "env": dict(self.env),
                "legacy_keras": self.legacy_keras, "data_dir": self.data_dir,
                "printed_metrics": self.printed_metrics, "patterns": list(self.patterns),
                "metrics_tasks": self.metrics_tasks}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScriptModel:
        env = data.get("env") or {}
        return cls(project=str(data.get("project", "")), entry=str(data.get("entry", "")),
                   args=tuple(str(a) for a in data.get("args") or ()),
                   env={str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {},
                   legacy_keras=bool(data.get("legacy_keras", False)),
                   data_dir=str(data.get("data_dir", "") or ""),
                   printed_metrics=bool(data.get("printed_metrics", True)),
                   patterns=tuple(str(p) for p in data.get("patterns") or ()),
                   metrics_tasks="all" if data.get("metrics_tasks") == "all" else "chief")

    def command(self) -> list[str]:
        """What runs in the project folder: python ENTRY ARGS (python = the task's)."""
        return ["python3", self.entry, *self.args]


@dataclass(frozen=True)
class Plan:
    run_name: str = "run"
    # A `Strategy`; a name that is none stays a str so that validation can say so.
    strategy: Strategy = Strategy.MIRRORED
    device_kind: str = "cpu"
    replicas_per_task: int = 2
    workers: int = 1  # worker tasks (multi-process strategies)
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
    # {"kind": "demo"}, a ModelFile's or a ScriptModel's fields with their kind
    model: dict[str, Any] = field(default_factory=lambda: {"kind": DEMO_KIND})
    tpu_address: str = ""
    cluster: dict[str, list[str]] = field(default_factory=dict)
    tasks: tuple[TaskSpec, ...] = ()
    # machine name -> {"address": reachable address, "login": "user@host:port",
    # "python": interpreter, "jump": an `ssh -J` argument when it goes through a jump host};
    # empty when every task runs on this machine.
    machines: dict[str, dict[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        known = Strategy.named(self.strategy)
        if known is not None and self.strategy is not known:
            object.__setattr__(self, "strategy", known)

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
    def on_gpu(self) -> bool:
        return self.device_kind == "gpu"

    @property
    def model_kind(self) -> str:
        """DEMO_KIND, FILE_KIND or SCRIPT_KIND."""
        return str(self.model.get("kind", ""))

    @property
    def model_file(self) -> ModelFile | None:
        """The user's model file, None for another kind of model."""
        return ModelFile.from_dict(self.model) if self.model_kind == FILE_KIND else None

    @property
    def script(self) -> ScriptModel | None:
        """The user's own training script, None for another kind of model."""
        return ScriptModel.from_dict(self.model) if self.model_kind == SCRIPT_KIND else None

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
        data = asdict(self)
        data["strategy"] = str(self.strategy)
        data["tasks"] = [t.to_dict() for t in self.tasks]
        return {"schema": SCHEMA, **data}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        """A plan from its JSON form; fields a file leaves out take the defaults above and
        fields this version does not know are ignored."""
        if not isinstance(data, dict):
            raise PlanError("plan.json does not hold a JSON object")
        if data.get("schema") != SCHEMA:
            raise PlanError(f"plan schema {data.get('schema')!r} is not {SCHEMA}; re-export it")
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        try:
            kwargs["tasks"] = tuple(TaskSpec.from_dict(t) for t in data.get("tasks", ()))
            return cls(**kwargs)
        except (TypeError, KeyError, ValueError) as exc:
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
