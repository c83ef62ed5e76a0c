"""What a plan trains: the built-in demo, a user's model file or a user's own training script.

plan.json holds it as an object with a "kind"; `model_from_dict` reads it once into one of
the three frozen dataclasses below (`PlanModel`), and every reader takes that. No TensorFlow:
the GUI process and every bundle share this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from .plan_options import MetricsTasks, PlanError, refuse_unknown

# The model kinds: the built-in demo, a user's model file, a user's own training script.
DEMO_KIND: Literal["demo"] = "demo"
FILE_KIND: Literal["file"] = "file"
SCRIPT_KIND: Literal["script"] = "script"
BUNDLE_PROJECT_DIR = "project"  # a bundle's copy of the user's project folder


@dataclass(frozen=True)
class DemoModel:
    """The built-in demo (a small digits classifier)."""

    kind: Literal["demo"] = field(default=DEMO_KIND, init=False)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind}


@dataclass(frozen=True)
class ModelFile:
    """A user's model file (build_model, make_dataset ...). In a bundle `path` is relative to
    the bundle and `project` the folder put on sys.path; before, both are the user's."""

    path: str
    project: str = ""
    kind: Literal["file"] = field(default=FILE_KIND, init=False)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "project": self.project}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelFile:
        return cls(path=str(data.get("path") or ""), project=str(data.get("project") or ""))


@dataclass(frozen=True)
class ScriptModel:
    """A user's own training script. Before the bundle is written `project` is the user's
    folder (absolute); in a bundle it is BUNDLE_PROJECT_DIR."""

    project: str
    entry: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    legacy_keras: bool = False
    data_dir: str = ""  # data kept on each machine at this path (DTGUI_DATASET_DIR); "" = none
    # metrics from the lines it prints (printed_metrics.py): the built-in reading, the user's
    # patterns (regular expressions with named groups), and which tasks
    printed_metrics: bool = True
    patterns: tuple[str, ...] = ()
    metrics_tasks: MetricsTasks = MetricsTasks.CHIEF
    kind: Literal["script"] = field(default=SCRIPT_KIND, init=False)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "project": self.project, "entry": self.entry,
                "args": list(self.args), "env": dict(self.env),
                "legacy_keras": self.legacy_keras, "data_dir": self.data_dir,
                "printed_metrics": self.printed_metrics, "patterns": list(self.patterns),
                "metrics_tasks": str(self.metrics_tasks)}

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
                   metrics_tasks=MetricsTasks.named(data.get("metrics_tasks"))
                   or MetricsTasks.CHIEF)

    def command(self) -> list[str]:
        """What runs in the project folder: python ENTRY ARGS (python = the task's)."""
        return ["python3", self.entry, *self.args]


PlanModel = DemoModel | ModelFile | ScriptModel
_KINDS: dict[str, type[DemoModel] | type[ModelFile] | type[ScriptModel]] = {
    DEMO_KIND: DemoModel, FILE_KIND: ModelFile, SCRIPT_KIND: ScriptModel}


def model_from_dict(data: object) -> PlanModel:
    """plan.json's model; PlanError names what does not fit (an unknown kind or field)."""
    if not isinstance(data, Mapping):
        raise PlanError("plan.json: model is not an object: re-export the plan.")
    kind = data.get("kind")
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise PlanError(f"plan.json: model.kind is {kind!r}, which is not one of "
                        f"{', '.join(_KINDS)}: re-export the plan.")
    refuse_unknown(data, (f.name for f in fields(cls)), "model.")
    if cls is DemoModel:
        return DemoModel()
    if cls is ModelFile:
        return ModelFile.from_dict(data)
    return ScriptModel.from_dict(data)
