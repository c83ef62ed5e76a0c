"""plan.json read once into types: the files the app has written keep reading (and are written
back the same), and a file with a field, strategy, option or model this version does not know
is refused at load with the reason."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from dtgui.core.measure.bottleneck import plan_facts
from dtgui.core.plans.plan import (
    Communication,
    DemoModel,
    DeviceKind,
    LrSchedule,
    MachineAccess,
    MetricsTasks,
    ModelFile,
    Optimizer,
    Plan,
    PlanError,
    Precision,
    ScriptModel,
    validate,
)
from dtgui.core.plans.strategies import Strategy
from dtgui.worker.model_file import UserError
from dtgui.worker.train import load_plan

# plan.json files as the app wrote them before the plan was typed (demo, a model file placed
# on two machines, a user's own script)
FIXTURES = Path(__file__).parent / "fixtures" / "plans"


def fixture(name: str) -> dict[str, Any]:
    data = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("name", ["demo.json", "file-two-machines.json", "script.json"])
def test_plans_written_before_still_read_and_are_written_back_the_same(name: str) -> None:
    path = FIXTURES / name
    plan = Plan.load(str(path))
    assert validate(plan) == []
    assert plan.to_json() == path.read_text(encoding="utf-8")
    assert Plan.from_dict(json.loads(plan.to_json())) == plan


def test_a_placed_plan_reads_into_its_types() -> None:
    plan = Plan.load(str(FIXTURES / "file-two-machines.json"))
    assert plan.strategy is Strategy.MULTI_WORKER_MIRRORED
    assert plan.device_kind is DeviceKind.GPU and plan.precision is Precision.MIXED_FLOAT16
    assert plan.communication is Communication.NCCL and plan.optimizer is Optimizer.ADAMW
    assert plan.lr_schedule is LrSchedule.WARMUP_COSINE
    assert plan.model == ModelFile("project/net.py", "project") and plan.model.kind == "file"
    assert plan.model_file == plan.model and plan.script is None
    assert plan.machine("gpu box") == MachineAccess("10.0.0.2", "ann@gpubox:22",
                                                    "/opt/venv/bin/python", "ann@gate:22")
    assert plan.machine("local") == MachineAccess(address="10.0.0.1")
    assert plan.machine("not in the plan") == MachineAccess()
    facts = plan_facts(plan)
    assert facts.gpu and facts.mixed_precision and facts.hosts == 2


def test_a_script_plan_reads_into_its_types() -> None:
    plan = Plan.load(str(FIXTURES / "script.json"))
    script = plan.script
    assert isinstance(script, ScriptModel) and plan.model is script
    assert script.args == ("--epochs=2",) and script.env == {"A": "1"}
    assert script.legacy_keras and script.data_dir == "/data"
    assert script.metrics_tasks is MetricsTasks.ALL
    assert Plan.load(str(FIXTURES / "demo.json")).model == DemoModel()


def test_a_plan_from_before_the_optimizers_reads_with_the_defaults() -> None:
    old = fixture("demo.json")
    for name in ("optimizer", "weight_decay", "momentum", "lr_schedule", "warmup_steps",
                 "lr_step_every", "lr_step_factor", "clip_norm", "grad_accumulation",
                 "validate_every", "save_best", "machines", "cluster", "tasks"):
        del old[name]
    plan = Plan.from_dict(old)
    assert plan.optimizer is Optimizer.ADAM and plan.lr_schedule is LrSchedule.CONSTANT
    assert plan.machines == {} and plan.tasks == ()


@pytest.mark.parametrize(
    ("change", "where", "hint"),
    [
        ({"learning_rat": 0.1}, "'learning_rat' is not a field", "remove it"),
        ({"strategy": "horovod"}, "strategy is 'horovod'", "mirrored"),
        ({"precision": "fp8"}, "precision is 'fp8'", "mixed_bfloat16"),
        ({"optimizer": "lamb"}, "optimizer is 'lamb'", "rmsprop"),
        ({"lr_schedule": "cyclic"}, "lr_schedule is 'cyclic'", "warmup_cosine"),
        ({"device_kind": "tpu"}, "device_kind is 'tpu'", "cpu, gpu"),
        ({"communication": "mpi"}, "communication is 'mpi'", "nccl"),
        ({"model": {"kind": "onnx"}}, "model.kind is 'onnx'", "demo, file, script"),
        ({"model": {"kind": "file", "path": "m.py", "weights": "w.h5"}},
         "model.'weights' is not a field", "remove it"),
        ({"model": "demo"}, "model is not an object", "re-export"),
        ({"machines": {"box": {"address": "10.0.0.2", "port": 22}}},
         "machines['box'].'port' is not a field", "remove it"),
        ({"tasks": [{"type": "worker", "index": 0, "rank": 0}]},
         "a task's 'rank' is not a field", "remove it"),
    ],
)
def test_a_plan_this_version_does_not_know_is_refused_with_the_reason(
        change: dict[str, Any], where: str, hint: str) -> None:
    data = {**fixture("demo.json"), **change}
    with pytest.raises(PlanError) as caught:
        Plan.from_dict(data)
    assert where in str(caught.value) and hint in str(caught.value)


def test_the_training_program_refuses_such_a_plan_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({**fixture("demo.json"), "strategy": "horovod"}))
    with pytest.raises(UserError, match="strategy is 'horovod'"):
        load_plan(str(path))


def test_a_plan_built_in_code_takes_option_names_and_keeps_unknown_ones_for_validation() -> None:
    plan = Plan(precision="mixed_bfloat16", optimizer="sgd")  # type: ignore[arg-type]  # str names
    assert plan.precision is Precision.MIXED_BFLOAT16 and plan.optimizer is Optimizer.SGD
    assert plan.with_changes(lr_schedule="step").lr_schedule is LrSchedule.STEP
    wrong = Plan(precision="fp8")  # type: ignore[arg-type]  # validate says
    assert any("Precision must be one of" in p for p in validate(wrong))
    with pytest.raises(TypeError, match="ModelFile"):
        Plan(model={"kind": "demo"})  # type: ignore[arg-type]  # refused at run time


def test_profile_steps_are_a_plan_field_checked_for_what_dtgui_can_capture() -> None:
    """A plan's profile steps go through plan.json (a plan profiling nothing is written as
    before the field); validation takes FIRST-LAST within the run's steps for dtgui's loop and
    refuses, with the reason, steps outside them and a script (ParameterServer's coordinator
    captures itself and its workers)."""
    from dtgui.cli.main import step_span
    from dtgui.worker.call_size import StepsPerCall

    plan = Plan(steps=300, profile_steps=(100, 119))
    assert plan.profiled and plan.to_dict()["profile_steps"] == [100, 119]
    assert Plan.from_dict(json.loads(plan.to_json())) == plan and validate(plan) == []
    assert "profile_steps" not in Plan(steps=300).to_dict() and not Plan().profiled
    with pytest.raises(PlanError, match="profile_steps"):
        Plan.from_dict({**plan.to_dict(), "profile_steps": "100-119"})
    for span in ((0, 5), (20, 10), (290, 301)):
        [problem] = validate(Plan(steps=300, profile_steps=span))
        assert problem.startswith(f"Profile steps {span[0]}-{span[1]}: give FIRST-LAST")
    assert validate(Plan(strategy=Strategy.PARAMETER_SERVER, workers=2, parameter_servers=1,
                         replicas_per_task=1, deterministic=False, steps=300,
                         profile_steps=(10, 20))) == []
    script = Plan(steps=300, profile_steps=(10, 20),
                  model=ScriptModel(project="/tmp/p", entry="train.py"))
    assert any("start TensorFlow's profiler in it" in p for p in validate(script))
    assert step_span("100-119") == (100, 119)
    with pytest.raises(argparse.ArgumentTypeError, match="FIRST-LAST"):
        step_span("100")
    # the calls are cut before the first profiled step and after the last
    sizer = StepsPerCall(50, 1)
    assert sizer.next(80, 300, ends=(99, 119)) == 19
    assert sizer.next(99, 300, ends=(99, 119)) == 20
    assert sizer.next(119, 300, ends=(99, 119)) == 50
