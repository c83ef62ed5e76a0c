"""The run wizard, driven through its real widgets with pytest-qt."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys
from pathlib import Path
from typing import Protocol

from dtgui.core.plans.placement import place_local
from dtgui.core.plans.plan import Communication, DeviceKind, Precision

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (
    QAbstractButton,
    QComboBox,
    QFileDialog,
    QLineEdit,
    QWidget,
    QWizard,
)
from pytestqt.qtbot import QtBot

from dtgui.core.machines.hardware import GpuInfo, MachineFacts, TfView
from dtgui.core.plans.plan import ModelFile, Plan
from dtgui.core.plans.strategies import STRATEGIES, Strategy
from dtgui.launch.checks.model_check import ModelCheck
from dtgui.ui.wizard import RunWizard
from dtgui.ui.wizard import model_page as model_page_module
from dtgui.ui.wizard import review_page as review_page_module
from dtgui.ui.wizard.wizard import PAGE_MODEL, PAGE_OPTIONS, PAGE_REVIEW, PAGE_STRATEGY

pytestmark = pytest.mark.gui

LEFT = Qt.MouseButton.LeftButton
TPU_ADDRESS = "grpc://10.0.0.2:8470"

GOOD_MODEL = '''
import keras
import numpy as np
import tensorflow as tf

NUM_CLASSES = 3


def build_model():
    return keras.Sequential([
        keras.Input(shape=(4,)),
        keras.layers.Dense(8, activation="relu"),
        keras.layers.Dense(NUM_CLASSES),
    ])


def make_dataset():
    rng = np.random.default_rng(0)
    features = rng.normal(size=(64, 4)).astype("float32")
    labels = rng.integers(0, NUM_CLASSES, size=(64,)).astype("int32")
    return tf.data.Dataset.from_tensor_slices((features, labels))
'''

BROKEN_MODEL = '''
import numpy as np
import tensorflow as tf


def build_model():
    raise ValueError("no layers configured")


def make_dataset():
    x = np.zeros((8, 4), "float32")
    y = np.zeros((8,), "int32")
    return tf.data.Dataset.from_tensor_slices((x, y))
'''


# -- helpers ---------------------------------------------------------------------------------
def cpu_facts(cores: int = 2) -> MachineFacts:
    return MachineFacts(hostname="box", os_name="Linux", python="3.11", cpu_model="cpu",
                        cpu_cores=cores, ram_total=8 << 30, tf=TfView(version="2.21.0"))


def gpu_facts(count: int = 2, cc: str = "8.6") -> MachineFacts:
    gpus = [GpuInfo(i, "NVIDIA RTX A4000", 16 << 30, 0, 0.0, "550", cc) for i in range(count)]
    return MachineFacts(hostname="gpubox", os_name="Linux", python="3.11", cpu_model="cpu",
                        cpu_cores=8, ram_total=32 << 30, gpus=gpus,
                        tf=TfView(version="2.21.0", gpus=tuple(f"GPU:{i}" for i in range(count)),
                                  built_with_cuda=True))


class MakeWizard(Protocol):
    def __call__(self, facts: MachineFacts | None = None,
                 initial: Plan | None = None) -> RunWizard: ...


@pytest.fixture
def make_wizard(qtbot: QtBot) -> MakeWizard:
    def make(facts: MachineFacts | None = None, initial: Plan | None = None) -> RunWizard:
        wizard = RunWizard(facts if facts is not None else cpu_facts(), initial)
        qtbot.addWidget(wizard)
        wizard.show()
        qtbot.waitExposed(wizard)
        return wizard

    return make


def next_button(wizard: RunWizard) -> QAbstractButton:
    return wizard.button(QWizard.WizardButton.NextButton)


def click_next(qtbot: QtBot, wizard: RunWizard) -> None:
    button = next_button(wizard)
    assert button.isEnabled(), f"Next is disabled on page {wizard.currentId()}"
    before = wizard.currentId()
    qtbot.mouseClick(button, LEFT)
    assert wizard.currentId() == before + 1


def click_strategy(qtbot: QtBot, wizard: RunWizard, key: str) -> None:
    strategies = wizard.strategy_page.strategy_list
    for row in range(strategies.count()):
        item = strategies.item(row)
        if item.data(Qt.ItemDataRole.UserRole) == key:
            rect = strategies.visualItemRect(item)
            qtbot.mouseClick(strategies.viewport(), LEFT, pos=rect.center())
            break
    assert wizard.strategy_page.strategy() == key


def choice(combo: QComboBox, data: str) -> QStandardItem:
    """The combo box's item whose data is `data` (its model is a QStandardItemModel)."""
    model = combo.model()
    assert isinstance(model, QStandardItemModel)
    item = model.item(combo.findData(data))
    assert item is not None, data
    return item


def click_radio(qtbot: QtBot, radio: QAbstractButton) -> None:
    """Click on the radio's indicator (a wide radio button ignores clicks right of its text)."""
    qtbot.mouseClick(radio, LEFT, pos=QPoint(8, radio.height() // 2))
    assert radio.isChecked()


def set_text(qtbot: QtBot, edit: QLineEdit, text: str) -> None:
    edit.selectAll()
    edit.clear()
    if text:
        qtbot.keyClicks(edit, text)


def review_entries(wizard: RunWizard) -> list[tuple[str, str, str]]:
    """(task id, TF_CONFIG text, script text) for every row of the review's task list."""
    review = wizard.review_page
    rows = []
    for row in range(review.task_list.count()):
        review.task_list.setCurrentRow(row)
        rows.append((review.task_list.item(row).text(), review.tf_config_view.toPlainText(),
                     review.script_view.toPlainText()))
    return rows


def model_file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def check_model_available() -> bool:
    return importlib.util.find_spec("dtgui.worker.check_model") is not None


# -- page 1: strategy ------------------------------------------------------------------------
def test_lists_every_strategy_and_marks_the_recommendation(make_wizard: MakeWizard) -> None:
    wizard = make_wizard(cpu_facts(cores=2))
    page = wizard.strategy_page
    texts = [page.strategy_list.item(r).text() for r in range(page.strategy_list.count())]
    assert len(texts) == len(STRATEGIES) == 6
    assert [t for t in texts if "(recommended)" in t] == ["Mirrored  (recommended)"]
    assert page.strategy() == "mirrored"
    assert "No GPU usable by TensorFlow" in page.recommend_label.text()
    assert page.replicas_spin.value() == 2
    assert wizard.currentId() == PAGE_STRATEGY


def test_summary_follows_the_selection(qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard()
    click_strategy(qtbot, wizard, "central_storage")
    assert wizard.strategy_page.title_label.text() == "CentralStorage"
    assert wizard.strategy_page.summary_label.text() == STRATEGIES["central_storage"].summary
    assert "Recommended here: Mirrored" in wizard.strategy_page.recommend_label.text()


def test_no_facts_recommends_on_a_two_core_cpu_and_disables_gpu(
        make_wizard: MakeWizard, qtbot: QtBot) -> None:
    wizard = RunWizard(None)
    qtbot.addWidget(wizard)
    page = wizard.strategy_page
    assert page.strategy() == "mirrored" and page.replicas_spin.value() == 2
    assert not page.gpu_radio.isEnabled()
    assert page.gpu_radio.toolTip()


def test_gpu_is_disabled_with_a_reason_without_a_usable_gpu(make_wizard: MakeWizard) -> None:
    wizard = make_wizard(cpu_facts())
    page = wizard.strategy_page
    assert not page.gpu_radio.isEnabled()
    assert "No GPU" in page.gpu_radio.toolTip()


def test_gpu_machine_recommends_mirrored_on_gpus(qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard(gpu_facts(2))
    page = wizard.strategy_page
    assert page.gpu_radio.isEnabled()
    click_radio(qtbot, page.gpu_radio)
    assert page.device_kind() == "gpu"
    assert page.replicas_spin.maximum() == 2  # at most the usable GPUs


def test_widgets_that_do_not_apply_are_hidden_or_disabled(
        qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard()
    page = wizard.strategy_page
    form = page.form

    def visible(widget: QWidget) -> bool:
        return form.isRowVisible(widget)

    assert not visible(page.workers_spin) and not visible(page.ps_spin)
    assert not visible(page.tpu_edit)
    page.replicas_spin.setValue(3)
    click_strategy(qtbot, wizard, "one_device")
    assert page.replicas_spin.value() == 1 and not page.replicas_spin.isEnabled()
    assert "exactly one replica" in page.replicas_spin.toolTip()
    click_strategy(qtbot, wizard, "mirrored")
    assert page.replicas_spin.isEnabled() and page.replicas_spin.value() == 3  # restored
    click_strategy(qtbot, wizard, "multi_worker_mirrored")
    assert visible(page.workers_spin) and not visible(page.ps_spin)
    click_strategy(qtbot, wizard, "parameter_server")
    assert visible(page.workers_spin) and visible(page.ps_spin)
    assert not page.replicas_spin.isEnabled()
    click_strategy(qtbot, wizard, "tpu")
    assert visible(page.tpu_edit) and not visible(page.workers_spin)
    assert not page.cpu_radio.isEnabled() and not page.gpu_radio.isEnabled()


def test_tpu_with_an_empty_address_cannot_go_next(qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard()
    page = wizard.strategy_page
    click_strategy(qtbot, wizard, "tpu")
    assert not next_button(wizard).isEnabled()
    assert page.errors.isVisible()
    assert "TPU needs an address" in page.errors.text()
    set_text(qtbot, page.tpu_edit, "   ")
    assert not next_button(wizard).isEnabled()
    set_text(qtbot, page.tpu_edit, TPU_ADDRESS)
    assert next_button(wizard).isEnabled()
    assert not page.errors.isVisible()


# -- walking every strategy to the review -----------------------------------------------------
EXPECTED_TASKS = {
    "one_device": ["worker:0"],
    "mirrored": ["worker:0"],
    "central_storage": ["worker:0"],
    "tpu": ["worker:0"],
    "multi_worker_mirrored": ["worker:0", "worker:1"],
    "parameter_server": ["chief:0", "worker:0", "worker:1", "ps:0"],
}


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_every_strategy_reaches_a_review_with_one_entry_per_task(
        qtbot: QtBot, make_wizard: MakeWizard, strategy: str) -> None:
    wizard = make_wizard()
    page = wizard.strategy_page
    click_strategy(qtbot, wizard, strategy)
    if strategy in ("multi_worker_mirrored", "parameter_server"):
        page.workers_spin.setValue(2)
    if strategy == "parameter_server":
        page.ps_spin.setValue(1)
    if strategy == "tpu":
        set_text(qtbot, page.tpu_edit, TPU_ADDRESS)
    for _ in range(3):
        click_next(qtbot, wizard)
    assert wizard.currentId() == PAGE_REVIEW

    entries = review_entries(wizard)
    assert [task_id for task_id, _, _ in entries] == EXPECTED_TASKS[strategy]
    plan = wizard.plan()
    assert [t.task_id for t in plan.tasks] == EXPECTED_TASKS[strategy]
    ports = [t.port for t in plan.tasks]
    for (task_id, config_text, script), task in zip(entries, plan.tasks, strict=True):
        assert f"Task {task_id} of run {plan.run_name}" in script
        assert script.startswith("#!/bin/sh")
        if len(entries) == 1 and strategy != "multi_worker_mirrored":
            assert "TF_CONFIG" not in script
            assert "Not set" in config_text
            continue
        config = json.loads(config_text)
        assert config["task"] == {"type": task.type, "index": task.index}
        assert config["cluster"] == plan.cluster
        assert "export TF_CONFIG=" in script
    if strategy == "multi_worker_mirrored":
        assert len(set(ports)) == 2 and all(ports)
        assert plan.cluster == {"worker": [f"127.0.0.1:{p}" for p in ports]}
    if strategy == "parameter_server":
        assert len(set(ports)) == 4 and all(ports)
        assert set(plan.cluster) == {"chief", "worker", "ps"}
        assert len(plan.cluster["worker"]) == 2 and len(plan.cluster["ps"]) == 1
    summary = wizard.review_page.summary_values
    assert summary["Strategy"].text() == STRATEGIES[strategy].title
    if strategy != "tpu":
        assert summary["Global batch"].text() == str(plan.global_batch)


# -- page 2: options -----------------------------------------------------------------------
def test_nccl_is_not_selectable_on_cpu(qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard()
    click_next(qtbot, wizard)
    combo = wizard.options_page.communication_combo
    nccl = choice(combo, "nccl")
    assert combo.isEnabled()
    assert not nccl.isEnabled()
    assert "NCCL needs GPUs" in nccl.toolTip()
    assert choice(combo, "ring").isEnabled()


def test_nccl_is_selectable_on_gpus_and_communication_only_where_supported(
        qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard(gpu_facts(2))
    click_radio(qtbot, wizard.strategy_page.gpu_radio)
    click_next(qtbot, wizard)
    combo = wizard.options_page.communication_combo
    assert choice(combo, "nccl").isEnabled()
    combo.setCurrentIndex(combo.findData("nccl"))
    assert next_button(wizard).isEnabled()
    qtbot.mouseClick(wizard.button(QWizard.WizardButton.BackButton), LEFT)
    click_strategy(qtbot, wizard, "central_storage")
    click_next(qtbot, wizard)
    # A choice that no longer applies stays visible and is refused with the reason.
    assert not next_button(wizard).isEnabled()
    assert "no collective communication option" in wizard.options_page.errors.text()
    combo.setCurrentIndex(combo.findData("auto"))
    assert next_button(wizard).isEnabled()
    assert not combo.isEnabled()


def test_the_all_reduce_levers_are_offered_only_where_the_all_reduce_crosses_machines(
        qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard()
    page = wizard.options_page
    for strategy, offered, reason in (
            ("multi_worker_mirrored", True, "half the bytes"),
            ("mirrored", False, "On one machine the all-reduce does not cross a network"),
            ("parameter_server", False, "ParameterServer has no all-reduce")):
        click_strategy(qtbot, wizard, strategy)
        click_next(qtbot, wizard)
        assert page.compression_combo.isEnabled() is offered, strategy
        assert page.pack_spin.isEnabled() is offered, strategy
        assert reason in page.compression_combo.toolTip(), strategy
        if offered:
            page.compression_combo.setCurrentIndex(page.compression_combo.findData("float16"))
            page.pack_spin.setValue(32)
            plan = wizard.ctx.draft()
            assert plan.grad_compression == "float16" and plan.bytes_per_pack == 32 << 20
            page.compression_combo.setCurrentIndex(page.compression_combo.findData("none"))
            page.pack_spin.setValue(0)
        qtbot.mouseClick(wizard.button(QWizard.WizardButton.BackButton), LEFT)


def test_invalid_numbers_and_names_disable_next_with_a_message(
        qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard()
    click_next(qtbot, wizard)
    page = wizard.options_page
    assert next_button(wizard).isEnabled()
    for bad in ("0", "20", "", "-"):
        set_text(qtbot, page.lr_edit, bad)
        assert not next_button(wizard).isEnabled(), bad
        assert "Learning rate must be a number" in page.errors.text()
    set_text(qtbot, page.lr_edit, "1e-3")
    assert next_button(wizard).isEnabled()
    assert page.learning_rate() == pytest.approx(0.001)
    set_text(qtbot, page.run_name_edit, "x; rm -rf ~")
    assert not next_button(wizard).isEnabled()
    assert "Run name" in page.errors.text() and page.errors.isVisible()
    set_text(qtbot, page.run_name_edit, "my-run_1.0")
    assert next_button(wizard).isEnabled()
    assert not page.errors.isVisible()


def test_xla_is_refused_with_parameter_server(qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard()
    click_next(qtbot, wizard)
    wizard.options_page.xla_check.setChecked(True)
    qtbot.mouseClick(wizard.button(QWizard.WizardButton.BackButton), LEFT)
    click_strategy(qtbot, wizard, "parameter_server")
    click_next(qtbot, wizard)
    page = wizard.options_page
    assert not next_button(wizard).isEnabled()
    assert "XLA is not supported with ParameterServer" in page.errors.text()
    page.xla_check.setChecked(False)
    assert next_button(wizard).isEnabled()
    assert not page.xla_check.isEnabled()  # cannot be turned on again
    # asynchronous training is not repeatable: deterministic ops went off, with the reason
    assert not page.deterministic_check.isChecked()
    assert "trains asynchronously" in page.deterministic_check.toolTip()
    page.deterministic_check.setChecked(True)  # the person's choice is kept
    assert wizard.options_page.ctx.draft().deterministic


def test_mixed_float16_is_not_selectable_on_tpu(qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard()
    click_strategy(qtbot, wizard, "tpu")
    set_text(qtbot, wizard.strategy_page.tpu_edit, TPU_ADDRESS)
    click_next(qtbot, wizard)
    combo = wizard.options_page.precision_combo
    assert not choice(combo, "mixed_float16").isEnabled()
    assert choice(combo, "mixed_bfloat16").isEnabled()


def test_precision_hint_uses_the_gpus_compute_capability(
        qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard(gpu_facts(1, cc="7.5"))
    click_radio(qtbot, wizard.strategy_page.gpu_radio)
    click_next(qtbot, wizard)
    hint = wizard.options_page.precision_hint.text()
    assert "bfloat16 is fast on TPUs and recent CPUs/GPUs (Ampere+)" in hint
    assert "compute capability 7.5: float16 is fast, bfloat16 is not" in hint


def test_global_batch_updates_live(qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard()
    click_next(qtbot, wizard)
    page = wizard.options_page
    assert page.global_label.text() == "64 = 32 × 2 replicas"
    page.batch_spin.setValue(16)
    assert page.global_label.text() == "32 = 16 × 2 replicas"
    qtbot.mouseClick(wizard.button(QWizard.WizardButton.BackButton), LEFT)
    wizard.strategy_page.replicas_spin.setValue(4)
    click_next(qtbot, wizard)
    assert page.global_label.text() == "64 = 16 × 4 replicas"
    qtbot.mouseClick(wizard.button(QWizard.WizardButton.BackButton), LEFT)
    click_strategy(qtbot, wizard, "multi_worker_mirrored")
    wizard.strategy_page.workers_spin.setValue(3)
    click_next(qtbot, wizard)
    assert page.global_label.text().startswith("48 = 16 × 3 replicas")
    assert wizard.plan().global_batch == 48


def test_epochs_set_the_steps(qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard()
    click_next(qtbot, wizard)
    page = wizard.options_page
    page.spe_spin.setValue(20)
    page.epochs_spin.setValue(3)
    assert page.steps_spin.value() == 60
    page.steps_spin.setValue(50)
    assert page.epochs_spin.value() == pytest.approx(2.5)
    assert wizard.plan().steps == 50 and wizard.plan().steps_per_epoch == 20
    # the demo's pass over its data beside the epoch set, and a click to make them one
    # before the model page: the hint names the model it assumes
    assert page.epoch_hint.text() == ("With the demo model (the next page chooses the model): "
                                      "1500 examples, about 23 steps at this batch "
                                      "(<a href='23'>use 23</a>).")
    page.epoch_hint.linkActivated.emit("23")
    assert page.spe_spin.value() == 23 and page.epoch_hint.text().endswith("steps at this "
                                                                           "batch, one epoch.")


# -- the remembered plan ---------------------------------------------------------------------
def test_an_initial_plan_restores_every_field(
        qtbot: QtBot, make_wizard: MakeWizard, tmp_path: Path) -> None:
    path = model_file(tmp_path, "net.py", GOOD_MODEL)
    initial = Plan(run_name="last-run", strategy=Strategy.PARAMETER_SERVER, device_kind=DeviceKind.CPU,
                   replicas_per_task=1, workers=3, parameter_servers=2, precision=Precision.MIXED_BFLOAT16,
                   xla=False, communication=Communication.AUTO, per_replica_batch=48, steps=321,
                   steps_per_epoch=7, learning_rate=0.0025, seed=7, deterministic=False,
                   checkpoint_every=0, model=ModelFile(str(path)))
    wizard = make_wizard(cpu_facts(), initial)
    strategy, options, model = wizard.strategy_page, wizard.options_page, wizard.model_page
    assert strategy.strategy() == "parameter_server"
    assert strategy.workers_spin.value() == 3 and strategy.ps_spin.value() == 2
    assert options.precision_combo.currentData() == "mixed_bfloat16"
    assert options.batch_spin.value() == 48
    assert options.steps_spin.value() == 321 and options.spe_spin.value() == 7
    assert options.lr_edit.text() == "0.0025"
    assert options.seed_spin.value() == 7
    assert not options.deterministic_check.isChecked()
    assert options.checkpoint_spin.text() == "off"
    assert options.run_name_edit.text() == "last-run"
    assert model.file_radio.isChecked() and model.path_edit.text() == str(path)
    draft = wizard.ctx.draft()
    for name in ("run_name", "strategy", "device_kind", "replicas_per_task", "workers",
                 "parameter_servers", "precision", "xla", "communication", "per_replica_batch",
                 "steps", "steps_per_epoch", "learning_rate", "seed", "deterministic",
                 "checkpoint_every", "model", "tpu_address"):
        assert getattr(draft, name) == getattr(initial, name), name


def test_a_damaged_initial_plan_still_opens(make_wizard: MakeWizard) -> None:
    damaged = Plan.from_dict({"schema": 1, "strategy": "multi_worker_mirrored", "workers": "3",
                              "steps": float("inf"), "learning_rate": "fast", "seed": None,
                              "run_name": "ok-name"})
    # an unknown option name is refused when plan.json is read; one set in code stays
    damaged = damaged.with_changes(precision="float64")
    wizard = make_wizard(cpu_facts(), damaged)
    assert wizard.strategy_page.strategy() == "multi_worker_mirrored"
    assert wizard.strategy_page.workers_spin.value() == 2  # the default
    assert wizard.options_page.steps_spin.value() == 100
    assert wizard.options_page.lr_edit.text() == "0.001"
    assert wizard.options_page.precision_combo.currentData() == "float32"
    assert next_button(wizard).isEnabled()


def test_an_initial_gpu_plan_falls_back_to_cpu_with_a_note(make_wizard: MakeWizard) -> None:
    wizard = make_wizard(cpu_facts(), Plan(strategy=Strategy.MIRRORED, device_kind=DeviceKind.GPU,
                                           replicas_per_task=2))
    page = wizard.strategy_page
    assert page.device_kind() == "cpu"
    assert "none is usable here" in page.device_note.text()


def test_an_initial_tpu_plan_restores_the_address(make_wizard: MakeWizard) -> None:
    wizard = make_wizard(cpu_facts(), Plan(strategy=Strategy.TPU, replicas_per_task=1,
                                           tpu_address=TPU_ADDRESS))
    assert wizard.strategy_page.tpu_edit.text() == TPU_ADDRESS
    assert next_button(wizard).isEnabled()


# -- page 3: model ---------------------------------------------------------------------------
def test_model_page_shows_the_contract_and_defaults_to_the_demo(
        qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard()
    click_next(qtbot, wizard)
    click_next(qtbot, wizard)
    page = wizard.model_page
    assert wizard.currentId() == PAGE_MODEL
    assert page.demo_radio.isChecked() and next_button(wizard).isEnabled()
    assert not page.path_edit.isEnabled()
    click_radio(qtbot, page.file_radio)
    assert not next_button(wizard).isEnabled()  # no file yet
    assert page.path_edit.isEnabled()
    click_radio(qtbot, page.demo_radio)
    assert next_button(wizard).isEnabled()
    assert "cross-entropy, Adam (Training options)" in page.demo_net.text()
    wizard.back()  # the optimizer is chosen on the page before
    box = wizard.options_page.optimizer_box
    box.optimizer_combo.setCurrentIndex(box.optimizer_combo.findData("sgd"))
    click_next(qtbot, wizard)
    assert "cross-entropy, SGD with momentum (Training options)" in page.demo_net.text()


def test_model_check_result_gates_next(
        qtbot: QtBot, make_wizard: MakeWizard, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
        ) -> None:
    """The page's logic with a stand-in check (the real one runs below, marked slow)."""
    good = model_file(tmp_path, "good.py", "x = 1\n")
    bad = model_file(tmp_path, "bad.py", "x = 1\n")
    monkeypatch.setattr(model_page_module, "check_model_file", lambda path: (
        ModelCheck(True, summary="64 examples, input (4,), output (3,)") if path.name == "good.py"
        else ModelCheck(False, "Your model file raised ValueError in build_model(): nope",
                        "Traceback (most recent call last):\nValueError: nope")))
    wizard = make_wizard()
    click_next(qtbot, wizard)
    click_next(qtbot, wizard)
    page = wizard.model_page
    monkeypatch.setattr(QFileDialog, "getOpenFileName",
                        lambda *a, **k: (str(bad), "Python files (*.py)"))
    qtbot.mouseClick(page.browse_button, LEFT)
    assert page.file_radio.isChecked()
    qtbot.waitUntil(lambda: page.status_label.text().startswith("✗"), timeout=10_000)
    assert "raised ValueError in build_model()" in page.status_label.text()
    assert not next_button(wizard).isEnabled()
    assert page.details_button.isVisible() and not page.details_view.isVisible()
    qtbot.mouseClick(page.details_button, LEFT)
    assert page.details_view.isVisible()
    assert "Traceback" in page.details_view.toPlainText()

    set_text(qtbot, page.path_edit, str(good))
    qtbot.keyClick(page.path_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: next_button(wizard).isEnabled(), timeout=10_000)
    assert page.status_label.text().startswith("✓")
    assert not page.details_button.isVisible()
    assert wizard.ctx.draft().model == ModelFile(str(good))
    set_text(qtbot, page.path_edit, str(bad))  # edited: the old result no longer counts
    assert not next_button(wizard).isEnabled()


needs_real_check = pytest.mark.skipif(not check_model_available(),
                                      reason="dtgui.worker.check_model is missing")


def entered_model_file(qtbot: QtBot, make_wizard: MakeWizard, path: Path) -> RunWizard:
    """A wizard on its model page, the model file `path` typed in and Enter pressed (the check
    starts)."""
    wizard = make_wizard()
    click_next(qtbot, wizard)
    click_next(qtbot, wizard)
    page = wizard.model_page
    click_radio(qtbot, page.file_radio)
    set_text(qtbot, page.path_edit, str(path))
    qtbot.keyClick(page.path_edit, Qt.Key.Key_Return)
    return wizard


@pytest.mark.slow
@needs_real_check
def test_real_check_passes_a_good_model_file(
        qtbot: QtBot, make_wizard: MakeWizard, tmp_path: Path) -> None:
    path = model_file(tmp_path, "good_model.py", GOOD_MODEL)
    wizard = entered_model_file(qtbot, make_wizard, path)
    page = wizard.model_page
    assert page.busy.isVisible()
    assert "Checking good_model.py" in page.status_label.text()
    qtbot.waitUntil(lambda: not page.busy.isVisible(), timeout=90_000)
    assert page.status_label.text().startswith("✓"), page.status_label.text()
    assert f"its folder {path.parent} goes into the bundle (1 file," in page.status_label.text()
    assert next_button(wizard).isEnabled()
    click_next(qtbot, wizard)
    assert wizard.plan().model == ModelFile(str(path))
    assert "tensorflow" not in sys.modules


@pytest.mark.slow
@needs_real_check
def test_real_check_reports_a_broken_model_file(
        qtbot: QtBot, make_wizard: MakeWizard, tmp_path: Path) -> None:
    path = model_file(tmp_path, "broken_model.py", BROKEN_MODEL)
    wizard = entered_model_file(qtbot, make_wizard, path)
    page = wizard.model_page
    qtbot.waitUntil(lambda: not page.busy.isVisible(), timeout=90_000)
    text = page.status_label.text()
    assert text.startswith("✗") and "build_model" in text and "no layers configured" in text
    assert not next_button(wizard).isEnabled()
    qtbot.mouseClick(page.details_button, LEFT)
    assert "broken_model.py" in page.details_view.toPlainText()


# -- page 4: review, launch, export --------------------------------------------------------------
def walk_to_review(qtbot: QtBot, wizard: RunWizard) -> None:
    while wizard.currentId() != PAGE_REVIEW:
        click_next(qtbot, wizard)


def test_launch_accepts_with_the_placed_plan(qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard()
    click_strategy(qtbot, wizard, "multi_worker_mirrored")
    wizard.strategy_page.workers_spin.setValue(2)
    walk_to_review(qtbot, wizard)
    shown = wizard.review_page.placed_plan()
    export = wizard.button(QWizard.WizardButton.CustomButton1)
    assert export.isVisible() and export.text() == "Export bundle…"
    launch = wizard.button(QWizard.WizardButton.FinishButton)
    assert launch.text() == "Launch" and launch.isEnabled()
    with qtbot.waitSignal(wizard.accepted, timeout=2000):
        qtbot.mouseClick(launch, LEFT)
    assert wizard.result() == QWizard.DialogCode.Accepted
    assert wizard.action() == "launch"
    assert wizard.export_dir() is None
    plan = wizard.plan()
    assert plan == shown
    assert [t.task_id for t in plan.tasks] == ["worker:0", "worker:1"]
    assert plan.strategy == "multi_worker_mirrored" and plan.workers == 2


def test_export_asks_a_directory(
        qtbot: QtBot, make_wizard: MakeWizard, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
        ) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setattr(QFileDialog, "getExistingDirectory",
                        lambda *a, **k: str(empty))
    wizard = make_wizard()
    walk_to_review(qtbot, wizard)
    with qtbot.waitSignal(wizard.accepted, timeout=2000):
        qtbot.mouseClick(wizard.button(QWizard.WizardButton.CustomButton1), LEFT)
    assert wizard.action() == "export"
    assert wizard.export_dir() == empty
    assert wizard.plan().tasks


def test_export_into_a_non_empty_directory_uses_the_run_name(
        qtbot: QtBot, make_wizard: MakeWizard, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
        ) -> None:
    (tmp_path / "other.txt").write_text("x")
    monkeypatch.setattr(QFileDialog, "getExistingDirectory",
                        lambda *a, **k: str(tmp_path))
    wizard = make_wizard(cpu_facts(), Plan(run_name="exported-run"))
    walk_to_review(qtbot, wizard)
    with qtbot.waitSignal(wizard.accepted, timeout=2000):
        qtbot.mouseClick(wizard.button(QWizard.WizardButton.CustomButton1), LEFT)
    assert wizard.export_dir() == tmp_path / "exported-run"


def test_cancelled_export_dialog_stays_on_review(
        qtbot: QtBot, make_wizard: MakeWizard, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: "")
    wizard = make_wizard()
    walk_to_review(qtbot, wizard)
    qtbot.mouseClick(wizard.button(QWizard.WizardButton.CustomButton1), LEFT)
    assert wizard.isVisible() and wizard.action() == ""
    assert wizard.currentId() == PAGE_REVIEW


def test_export_button_only_on_the_review(qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard()
    export = wizard.button(QWizard.WizardButton.CustomButton1)
    for page in (PAGE_STRATEGY, PAGE_OPTIONS, PAGE_MODEL):
        assert wizard.currentId() == page
        assert not export.isVisible()
        click_next(qtbot, wizard)
    assert export.isVisible()


def test_replan_ports_places_again(
        qtbot: QtBot, make_wizard: MakeWizard, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = place_local

    def counting(plan: Plan, ports: list[int] | None = None) -> Plan:
        calls.append(1)
        return real(plan, ports)

    monkeypatch.setattr(review_page_module, "place_local", counting)
    wizard = make_wizard()
    click_strategy(qtbot, wizard, "parameter_server")
    walk_to_review(qtbot, wizard)
    assert len(calls) == 1  # once on entering
    qtbot.mouseClick(wizard.review_page.replan_button, LEFT)
    assert len(calls) == 2
    assert wizard.review_page.task_list.count() == 4
    qtbot.mouseClick(wizard.button(QWizard.WizardButton.BackButton), LEFT)
    qtbot.mouseClick(wizard.button(QWizard.WizardButton.BackButton), LEFT)
    qtbot.mouseClick(wizard.button(QWizard.WizardButton.BackButton), LEFT)
    click_strategy(qtbot, wizard, "mirrored")
    walk_to_review(qtbot, wizard)
    assert len(calls) == 3  # entering the review again places the new plan
    assert wizard.review_page.task_list.count() == 1
    assert not wizard.review_page.replan_button.isEnabled()  # one process, no ports


def test_busy_ports_are_warned_about(
        qtbot: QtBot, make_wizard: MakeWizard, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        busy = held.getsockname()[1]
        real = place_local
        monkeypatch.setattr(review_page_module, "place_local",
                            lambda plan: real(plan, [busy, 0, 0, 0]))
        wizard = make_wizard()
        click_strategy(qtbot, wizard, "parameter_server")
        walk_to_review(qtbot, wizard)
        warnings = wizard.review_page.warnings
        assert warnings.isVisible()
        assert f"Port {busy} (task chief:0) is in use" in warnings.text()
        assert "Press Re-plan ports" in warnings.text()


def test_hostile_text_never_reaches_a_script_unquoted(
        qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard()
    click_strategy(qtbot, wizard, "tpu")
    set_text(qtbot, wizard.strategy_page.tpu_edit, "grpc://h:1'; touch /tmp/pwned; '")
    click_next(qtbot, wizard)
    set_text(qtbot, wizard.options_page.run_name_edit, "$(reboot)")
    assert not next_button(wizard).isEnabled()
    set_text(qtbot, wizard.options_page.run_name_edit, "safe-name")
    walk_to_review(qtbot, wizard)
    script = wizard.review_page.script_view.toPlainText()
    assert "touch /tmp/pwned" not in script  # the address lives in plan.json, not the script
    assert "$(reboot)" not in script


def test_the_gui_process_does_not_import_tensorflow(make_wizard: MakeWizard) -> None:
    make_wizard()
    assert not [m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras")]


def test_a_generated_run_name_follows_the_strategy_and_a_typed_one_is_kept(
        qtbot: QtBot, make_wizard: MakeWizard) -> None:
    last = Plan(run_name="mirrored-20260101-120000", strategy=Strategy.MIRRORED, device_kind=DeviceKind.CPU,
                replicas_per_task=2)
    wizard = make_wizard(cpu_facts(), last)
    click_strategy(qtbot, wizard, "multi_worker_mirrored")
    click_next(qtbot, wizard)
    name = wizard.options_page.run_name_edit.text()
    assert name.startswith("multi-worker-mirrored-") and name != last.run_name
    set_text(qtbot, wizard.options_page.run_name_edit, "my-experiment")
    wizard.back()
    click_next(qtbot, wizard)
    assert wizard.options_page.run_name_edit.text() == "my-experiment"


def test_steps_per_call_is_automatic_by_default_and_can_be_fixed(
        qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard()
    options = wizard.options_page
    assert options.per_call_spin.value() == 0 and options.per_call_spin.text() == "automatic"
    assert wizard.ctx.draft().steps_per_call == 0
    options.per_call_spin.setValue(250)
    walk_to_review(qtbot, wizard)
    assert wizard.review_page.placed_plan().steps_per_call == 250
    assert "250 per call" in wizard.review_page.summary_values["Steps"].text()
    restored = make_wizard(None, wizard.review_page.placed_plan())
    assert restored.options_page.per_call_spin.value() == 250


def test_optimizer_schedule_and_validation_reach_the_plan_and_the_review(
        qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard()
    box = wizard.options_page.optimizer_box
    assert not box.decay_spin.isEnabled() and not box.warmup_spin.isEnabled()
    box.optimizer_combo.setCurrentIndex(box.optimizer_combo.findData("adamw"))
    assert box.decay_spin.isEnabled() and box.decay_spin.value() == 0.01  # AdamW's decay
    box.schedule_combo.setCurrentIndex(box.schedule_combo.findData("warmup_cosine"))
    assert box.warmup_spin.isEnabled() and not box.step_every_spin.isEnabled()
    box.warmup_spin.setValue(10)
    box.clip_spin.setValue(1.0)
    box.accumulate_spin.setValue(4)
    assert "256 examples" in box.hint.text()  # 4 x the global batch of 64
    box.validate_spin.setValue(20)
    box.best_check.setChecked(True)
    walk_to_review(qtbot, wizard)
    plan = wizard.review_page.placed_plan()
    assert (plan.optimizer, plan.weight_decay, plan.lr_schedule, plan.warmup_steps,
            plan.clip_norm, plan.grad_accumulation, plan.validate_every, plan.save_best) == \
        ("adamw", 0.01, "warmup_cosine", 10, 1.0, 4, 20, True)
    values = wizard.review_page.summary_values
    assert values["Learning rate"].text() == "0.001, warm-up 10 steps then cosine"
    assert values["Optimizer"].toolTip() == \
        "AdamW (decay 0.01), clip norm 1, 4 micro-batches per update"  # elided in the label
    assert values["Validation"].text() == "every 20 steps, best model kept"
    again = make_wizard(None, plan)
    restored = again.options_page.optimizer_box
    assert restored.optimizer_combo.currentData() == "adamw"
    assert restored.warmup_spin.value() == 10 and restored.best_check.isChecked()


def test_launch_when_free_names_the_button_queue(qtbot: QtBot, make_wizard: MakeWizard) -> None:
    wizard = make_wizard()
    for _ in range(3):
        click_next(qtbot, wizard)
    assert wizard.currentId() == PAGE_REVIEW
    finish = wizard.button(QWizard.WizardButton.FinishButton)
    assert finish.text() == "Launch"
    wizard.review_page.when_free.setChecked(True)
    assert finish.text() == "Queue" and "queue" in finish.toolTip()
    wizard.review_page.when_free.setChecked(False)
    assert finish.text() == "Launch" and "queue" not in finish.toolTip()
