"""Before a user's script is launched: the Keras 3 model.fit refusal, missing modules,
tensorboard, and which Keras each machine gives the script."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from dtgui.core.bundles.ignore import list_project
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.scripts.script import ScriptModel
from dtgui.core.scripts.script_scan import fit_refusal, scan_project
from dtgui.launch.checks.precheck import PythonCheck
from dtgui.launch.checks.script_check import check_local, keras_facts, machine_problems, study
from dtgui.launch.start.pipeline import LaunchError, launch_plan

PROJECTS = Path(__file__).resolve().parent / "script_projects"


def plan_for(project: Path, entry: str, *, legacy: bool = False,
             strategy: Strategy = Strategy.MULTI_WORKER_MIRRORED) -> Plan:
    return Plan(run_name="check", strategy=strategy, workers=2, replicas_per_task=1,
                checkpoint_every=0,
                model=ScriptModel(str(project), entry, legacy_keras=legacy))


def test_keras3_fit_under_multi_worker_is_refused_before_launch(tmp_path: Path) -> None:
    plan = plan_for(PROJECTS / "keras3_fit", "train.py")
    with pytest.raises(LaunchError) as info:
        launch_plan(plan, tmp_path / "runs")
    text = str(info.value)
    assert "train.py calls .fit( (train.py:11) with Keras 3" in text
    assert "MultiWorkerMirrored" in text and "PerReplica" in text
    assert "tf_keras" in text and "build_model() and make_dataset()" in text  # both ways out
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_which_keras_a_fit_gets() -> None:
    project = PROJECTS / "mwm_fit"
    scan = scan_project(project, list_project(project).files, "main.py")
    assert scan.fit_calls == ["main.py:32"] and scan.keras_imports == {"tf.keras"}
    assert fit_refusal(scan, "multi_worker_mirrored", False, "main.py")
    assert fit_refusal(scan, "parameter_server", False, "main.py")
    assert fit_refusal(scan, "multi_worker_mirrored", True, "main.py") == ""
    assert fit_refusal(scan, "mirrored", False, "main.py") == ""  # Keras 3 fit works there
    assert scan.imports == {"json", "os", "sys", "tensorflow", "numpy"}  # mnist_setup is local
    assert scan.summary_uses  # keras.callbacks.TensorBoard: needs tensorboard


def test_missing_module_and_legacy_keras_notes_on_this_machine(tmp_path: Path) -> None:
    project = tmp_path / "p"
    shutil.copytree(PROJECTS / "mwm_fit", project)
    main = project / "main.py"
    main.write_text("import dtgui_no_such_module_xyz\n" + main.read_text())
    problems, notes = check_local(plan_for(project, "main.py", legacy=True), sys.executable)
    assert any("dtgui_no_such_module_xyz" in p and "pip install" in p for p in problems)
    assert any("tf_keras 2.21" in n for n in notes)
    problems, _ = check_local(plan_for(PROJECTS / "mwm_fit", "main.py", legacy=True),
                              sys.executable)
    assert problems == []


def test_machine_problems_without_tensorboard_or_matching_tf_keras() -> None:
    found = study(plan_for(PROJECTS / "mwm_fit", "main.py", legacy=True))
    assert found is not None
    check = PythonCheck("h2", "/opt/py", tf_version="2.21.0",
                        packages={"tensorflow": "2.21.0", "tf-keras": "2.20.1",
                                  "tensorboard": "", "keras": "3.15.1"})
    problems = machine_problems(found, check)
    assert any("h2" in p and "tensorboard" in p and "2.21" in p for p in problems)
    assert any("tf-keras 2.20.1 does not match TensorFlow 2.21.0" in p for p in problems)
    check.packages["tf-keras"] = ""
    assert "not installed" in keras_facts(check, True, "2.21.0")[0][0]
    assert keras_facts(check, False, "2.21.0")[1] == "h2: the script gets Keras 3.15.1."


def test_data_folder_on_each_machine_must_exist(tmp_path: Path) -> None:
    model = ScriptModel(str(PROJECTS / "helper_data"), "train.py",
                        data_dir=str(tmp_path / "no-such-data"))
    plan = Plan(run_name="d", strategy=Strategy.ONE_DEVICE, replicas_per_task=1, model=model)
    problems, _ = check_local(plan, sys.executable)
    assert any("no-such-data" in p and "does not exist" in p for p in problems)
    (tmp_path / "no-such-data").mkdir()
    assert check_local(plan, sys.executable)[0] == []


def test_keras2_calls_are_a_warning_at_launch_under_keras3_not_with_legacy_keras(
        tmp_path: Path) -> None:
    """The tutorial's custom loop calls Metric.reset_states (Keras 2 only): under Keras 3 the
    launch goes on, with the warning and its fix in the first task's log; with legacy Keras
    there is nothing to warn of."""
    controller = launch_plan(plan_for(PROJECTS / "mwm_custom_loop", "main.py"),
                             tmp_path / "runs")
    try:
        warnings = [line for line in controller.metrics.log_lines("worker:0")
                    if line.startswith("[dtgui] warning:")]
        assert len(warnings) == 1
        assert "Metric.reset_states at main.py:" in warnings[0]
        assert "choose legacy Keras" in warnings[0]
    finally:
        controller.request_stop()
        assert controller.wait(60)
    legacy = study(plan_for(PROJECTS / "mwm_custom_loop", "main.py", legacy=True))
    assert legacy is not None and legacy.warnings == []
