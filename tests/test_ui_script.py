"""The wizard's "My own training script" choice, driven through its real widgets, and the
dashboard's scalar panel fed by real `scalar` events."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from pytestqt.qtbot import QtBot

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from fakes import FakeRun
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QWizard

from dtgui.core.events import parse_line
from dtgui.core.live_run import LiveRun
from dtgui.core.machines.hardware import MachineFacts, TfView
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.scripts.script import ScriptModel
from dtgui.ui.pages.dashboard import Dashboard
from dtgui.ui.wizard import RunWizard
from dtgui.ui.wizard.wizard import PAGE_MODEL, PAGE_REVIEW

pytestmark = pytest.mark.gui
PROJECTS = Path(__file__).resolve().parent / "script_projects"
LEFT = Qt.MouseButton.LeftButton


def cpu_facts() -> MachineFacts:
    return MachineFacts(hostname="t", os_name="Linux", python="3.11", cpu_model="cpu",
                        cpu_cores=2, ram_total=8 << 30, tf=TfView(version="2.21.0"))


def open_model_page(qtbot: QtBot,
                    strategy: Strategy = Strategy.MULTI_WORKER_MIRRORED) -> RunWizard:
    facts = cpu_facts()
    plan = Plan(run_name="s", strategy=strategy, workers=2, replicas_per_task=1)
    wizard = RunWizard(facts, plan)
    qtbot.addWidget(wizard)
    wizard.show()
    qtbot.waitExposed(wizard)
    wizard.next()
    wizard.next()
    assert wizard.currentId() == PAGE_MODEL
    return wizard


def pick_script(qtbot: QtBot, page: Any, project: Path, entry: str) -> Any:
    """Click "My own training script" on the model page and name the project and its entry
    file; returns the script box."""
    radio = page.script_radio
    qtbot.mouseClick(radio, LEFT, pos=QPoint(8, radio.height() // 2))
    box = page.script_box
    box.project_edit.setText(str(project))
    box.entry_edit.setText(entry)
    return box


def next_enabled(wizard: RunWizard) -> bool:
    return wizard.button(QWizard.WizardButton.NextButton).isEnabled()


def test_script_choice_checks_the_project_off_the_ui_thread(qtbot: QtBot, tmp_path: Path) -> None:
    project = tmp_path / "mwm_fit"
    shutil.copytree(PROJECTS / "mwm_fit", project)
    (project / ".venv").mkdir()
    (project / ".venv" / "pyvenv.cfg").write_text("")
    wizard = open_model_page(qtbot)
    page = wizard.model_page
    box = page.script_box
    radio = page.script_radio
    qtbot.mouseClick(radio, LEFT, pos=QPoint(8, radio.height() // 2))
    assert box.isVisible() and not page.contract.isVisible()
    assert not next_enabled(wizard)
    box.project_edit.setText(str(project))
    box.entry_edit.setText("main.py")
    box.start_look()
    # Keras 3 model.fit under MultiWorkerMirrored: refused with both ways out, Next stays off.
    qtbot.waitUntil(lambda: "calls .fit(" in box.errors.text(), timeout=60_000)
    assert "legacy Keras" in box.errors.text() and "build_model()" in box.errors.text()
    assert "2 file(s)" in box.size_label.text() and ".venv/ (a virtualenv)" in \
        box.size_label.text()
    assert not next_enabled(wizard)
    box.legacy_check.setChecked(True)
    qtbot.waitUntil(lambda: next_enabled(wizard), timeout=60_000)
    assert "tf_keras 2.21" in box.look_label.text()
    # Variables are validated as they are typed, with the reason.
    box.env_edit.setPlainText("GOOD=1\n9BAD=2\n")
    assert "not a variable name" in box.errors.text() and not next_enabled(wizard)
    box.env_edit.setPlainText("GOOD=1\n")
    box.args_edit.setText("4 2 '--name=a b'")
    qtbot.waitUntil(lambda: next_enabled(wizard), timeout=60_000)
    wizard.next()
    assert wizard.currentId() == PAGE_REVIEW
    model = wizard.plan().script
    assert model is not None and model.entry == "main.py"
    assert model.args == ("4", "2", "--name=a b") and model.env == {"GOOD": "1"}
    assert model.legacy_keras is True
    review = wizard.review_page
    assert review.summary_values["Model"].text().startswith("main.py")
    script_text = review.script_view.toPlainText()
    assert "export DTGUI_TASK=worker:0" in script_text and "TF_USE_LEGACY_KERAS=1" in script_text
    assert "cd project && $PYTHON main.py 4 2 '--name=a b'" in script_text
    plan_json = json.loads(wizard.plan().to_json())
    assert plan_json["model"]["kind"] == "script"


def test_a_remembered_script_plan_comes_back(qtbot: QtBot) -> None:
    facts = cpu_facts()
    model = ScriptModel(str(PROJECTS / "custom_loop"), "train.py", ("--x",), {"A": "1"},
                        legacy_keras=False, data_dir="/d")
    wizard = RunWizard(facts, Plan(strategy=Strategy.MIRRORED, model=model))
    qtbot.addWidget(wizard)
    box = wizard.model_page.script_box
    assert wizard.model_page.script_radio.isChecked()
    assert box.model() == model
    assert box.model().printed_metrics is True and box.model().metrics_tasks == "chief"


def scalar_line(task: str, tag: str, step: int, value: float) -> str:
    return json.dumps({"v": 2, "kind": "scalar", "task": task, "t": 1.0 + step, "tag": tag,
                       "step": step, "value": value})


def test_dashboard_shows_scalars_by_tag_and_the_script_loss(qtbot: QtBot) -> None:
    metrics = LiveRun(10)
    board = Dashboard()
    qtbot.addWidget(board)
    board.show()
    board.attach(FakeRun(metrics), run_name="s", strategy=Strategy.MULTI_WORKER_MIRRORED)
    assert not board.scalar_panel.isVisible()
    lines = [scalar_line(task, tag, step, 1.0 / (step + 1) + i)
             for step in range(4) for i, task in enumerate(("worker:0", "worker:1"))
             for tag in ("train/epoch_accuracy", "train/epoch_loss")]
    metrics.add_events([e for e in map(parse_line, lines) if e is not None])
    board.refresh()
    panel = board.scalar_panel
    assert panel.isVisible()
    assert panel.tags() == ["train/epoch_accuracy", "train/epoch_loss"]
    assert panel.tag == "train/epoch_loss"  # a loss is shown first
    assert set(panel.curves.curves) == {"worker:0", "worker:1"}
    assert sorted(board.loss_panel.replica_ids()) == [0, 1]  # the script's loss, per task
    assert not board.throughput_panel.isVisible()  # a script reports no throughput
    panel.tag_combo.setCurrentText("train/epoch_accuracy")
    assert panel.tag == "train/epoch_accuracy" and len(panel.curves.curves) == 2
    board.refresh()
    assert metrics.snapshot().epoch == 4


def test_options_page_says_a_script_gets_them_as_variables(qtbot: QtBot) -> None:
    model = ScriptModel(str(PROJECTS / "custom_loop"), "train.py")
    wizard = RunWizard(cpu_facts(), Plan(strategy=Strategy.MIRRORED, model=model))
    qtbot.addWidget(wizard)
    wizard.show()
    qtbot.waitExposed(wizard)
    wizard.next()
    options = wizard.options_page
    assert options.script_note.isVisible() and "DTGUI_PRECISION" in options.script_note.text()
    assert not options.optimizer_box.isEnabled()
    wizard.back()
    wizard.model_page.demo_radio.setChecked(True)
    wizard.next()
    assert not options.script_note.isVisible() and options.optimizer_box.isEnabled()


def test_what_this_machine_lacks_is_a_warning_not_a_stop(qtbot: QtBot, tmp_path: Path) -> None:
    """The tasks may all run on other machines: each is checked at launch."""
    project = tmp_path / "p"
    project.mkdir()
    (project / "train.py").write_text("import dtgui_no_such_module_xyz\n")
    wizard = open_model_page(qtbot, strategy=Strategy.MIRRORED)
    box = pick_script(qtbot, wizard.model_page, project, "train.py")
    box.start_look()
    qtbot.waitUntil(lambda: next_enabled(wizard), timeout=60_000)
    assert "⚠" in box.look_label.text() and "dtgui_no_such_module_xyz" in box.look_label.text()
    assert not box.errors.isVisible()


IT_PATTERN = r"\[it (?P<step>\d+)\] loss=(?P<loss>\S+) lr=(?P<lr>\S+)"


def test_printed_metric_patterns_are_tried_live_on_sample_lines(
        qtbot: QtBot, tmp_path: Path) -> None:
    wizard = open_model_page(qtbot)
    box = pick_script(qtbot, wizard.model_page, PROJECTS / "mwm_custom_loop", "main.py")
    printed = box.printed_box
    assert not printed.more.isVisible()  # the patterns and the try open on demand
    qtbot.mouseClick(printed.more_button, LEFT)
    assert printed.more.isVisible() and printed.preview_label.isHidden()
    printed.sample_edit.setPlainText("Epoch: 0, accuracy: 0.327567, train_loss: 1.820119.\n"
                                     "[it 120] loss=0.53 lr=1e-3\n")
    shown = printed.preview_label.text()
    assert "train_loss 1.82012" in shown and "@ epoch 0" in shown and "built-in" in shown
    printed.patterns_edit.setPlainText("(unclosed")
    assert "not a regular expression" in box.errors.text()
    printed.patterns_edit.setPlainText(IT_PATTERN)
    assert "not a regular expression" not in box.errors.text()
    shown = printed.preview_label.text()
    assert "loss 0.53, lr 0.001 @ step 120 (pattern 1)" in shown
    printed.tasks_combo.setCurrentIndex(printed.tasks_combo.findData("all"))
    model = box.model()
    assert model.patterns == (IT_PATTERN,) and model.metrics_tasks == "all"


def test_samples_come_from_the_script_s_last_run(
        qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = tmp_path / "runs" / "last"
    logs = bundle / "output" / "logs"
    logs.mkdir(parents=True)
    plan = Plan(run_name="last", model=ScriptModel("project", "main.py"))
    (bundle / "plan.json").write_text(plan.to_json())
    (logs / "worker-0.log").write_text("starting\nEpoch: 0, accuracy: 0.3, train_loss: 1.8.\n")
    monkeypatch.setenv("DTGUI_DATA_DIR", str(tmp_path))
    wizard = open_model_page(qtbot)
    box = pick_script(qtbot, wizard.model_page, PROJECTS / "mwm_custom_loop", "main.py")
    box.start_look()
    qtbot.mouseClick(box.printed_box.more_button, LEFT)
    qtbot.mouseClick(box.printed_box.last_run_button, LEFT)
    qtbot.waitUntil(lambda: "train_loss 1.8" in box.printed_box.preview_label.text(),
                    timeout=60_000)
    assert "run last" in box.printed_box.note.text()


def test_keras2_calls_are_a_warning_on_the_model_page_until_legacy_keras(qtbot: QtBot) -> None:
    wizard = open_model_page(qtbot)
    box = pick_script(qtbot, wizard.model_page, PROJECTS / "mwm_custom_loop", "main.py")
    box.start_look()
    qtbot.waitUntil(lambda: "Metric.reset_states" in box.look_label.text(), timeout=60_000)
    assert "choose legacy Keras" in box.look_label.text()
    assert next_enabled(wizard)  # a warning: the run may still be launched
    box.legacy_check.setChecked(True)
    qtbot.waitUntil(lambda: "tf_keras" in box.look_label.text(), timeout=60_000)
    assert "reset_states" not in box.look_label.text()


def test_the_review_of_a_script_run_shows_the_script_not_dtgui_s_defaults(qtbot: QtBot) -> None:
    model = ScriptModel(str(PROJECTS / "mwm_custom_loop"), "main.py", ("3", "7"),
                        {"DATA": "/d"}, True)
    wizard = RunWizard(cpu_facts(), Plan(run_name="s", strategy=Strategy.MULTI_WORKER_MIRRORED,
                                         workers=2, replicas_per_task=1, model=model))
    qtbot.addWidget(wizard)
    wizard.show()
    review = wizard.review_page
    review.initializePage()
    values = {k: v.text() for k, v in review.summary_values.items()}
    assert "Adam" not in values["Optimizer"] and "script's own" in values["Optimizer"]
    assert "script's own" in values["Steps"] and "25 per epoch" not in values["Steps"]
    assert "script's own" in values["Validation"] and "every epoch" not in values["Validation"]
    assert "script's own" in values["Checkpoints"]
    info = review.script_info.text()
    assert review.script_info.isVisibleTo(review)
    assert "main.py 3 7" in info and "DATA=/d" in info and "TF_USE_LEGACY_KERAS=1" in info
    assert "DTGUI_STEPS=100" in info and "do not apply" in info


def test_the_header_shows_a_script_s_own_progress_and_time_left(qtbot: QtBot) -> None:
    metrics = LiveRun(10)
    model = ScriptModel("project", "main.py", ("3",), legacy_keras=True)
    plan = Plan(strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2, model=model)
    board = Dashboard()
    qtbot.addWidget(board)
    board.show()
    board.attach(FakeRun(metrics, plan=plan), run_name="s")
    assert "script main.py 3 · tf_keras" in board.header.strategy_label.text()
    assert "DTGUI_STEPS=" in board.header.strategy_label.toolTip()
    lines = [json.dumps({"v": 2, "kind": "started", "task": "worker:0", "t": 0.0}),
             json.dumps({"v": 2, "kind": "progress", "task": "worker:0", "t": 20.0,
                         "unit": "epoch", "done": 2, "total": 10})]
    metrics.add_events([e for e in map(parse_line, lines) if e is not None])
    qtbot.waitUntil(lambda: "2 / 10 epochs" in board.header.step_label.text(), timeout=60_000)
    assert "(20%)" in board.header.step_label.text()
    assert "left" in board.header.step_label.text()
    assert board.header.progress.value() == 200
    assert not board.header.epoch_label.isVisible()  # the progress says the epochs already
    printed = json.dumps({"v": 2, "kind": "scalar", "task": "worker:0", "t": 20.0,
                          "tag": "train_loss", "step": 1, "value": 1.4, "source": "printed",
                          "axis": "epoch"})
    metrics.add_events([e for e in map(parse_line, [printed]) if e is not None])
    # the panel takes the tag, then its axis the unit, at the next refreshes (not the same)
    qtbot.waitUntil(lambda: board.scalar_panel.tag == "train_loss"
                    and board.scalar_panel.plot.getAxis("bottom").labelText == "epoch"
                    and board.loss_panel.plot.getAxis("bottom").labelText == "epoch",
                    timeout=60_000)


def test_the_run_history_says_what_a_script_run_was(qtbot: QtBot, tmp_path: Path) -> None:
    from dtgui.core.bundles.bundle import render_bundle
    from dtgui.core.plans.placement import place_local
    from dtgui.core.runs.records import RunRecord
    from dtgui.core.runs.run_index import RunIndex
    from dtgui.ui.pages.runs_model import STRATEGY
    from dtgui.ui.pages.runs_page import RunsPage

    model = ScriptModel(str(PROJECTS / "mwm_custom_loop"), "main.py", ("3",), {"A": "1"},
                        True)
    plan = Plan(run_name="h", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                replicas_per_task=1, model=model)
    bundle = render_bundle(place_local(plan), tmp_path / "h")
    record = RunRecord(run_id="h", run_name="h", bundle=str(bundle.path),
                       strategy=Strategy.MULTI_WORKER_MIRRORED, created=0.0)
    record.save()
    page = RunsPage()
    qtbot.addWidget(page)
    page.show_rows(RunIndex(tmp_path).rows())
    assert page.cell_text(0, STRATEGY) == "MultiWorkerMirrored · script main.py 3 · tf_keras"
