"""The sweep view over a sweep folder (its study written with Optuna here: no runs): the table
best first, the parallel-coordinates plot, a scatter per parameter, Compare of the selected
trials, the best run, the CSV."""

from __future__ import annotations

import csv
import os
from dataclasses import replace
from pathlib import Path

import optuna
import pyqtgraph as pg
import pytest
from cut_text import cut_texts
from optuna.trial import TrialState
from PySide6.QtCore import QItemSelectionModel
from pytestqt.qtbot import QtBot

from dtgui.core.plans.plan import DeviceKind, Plan
from dtgui.core.runs.records import RunRecord, remember_sweep
from dtgui.core.runs.run_index import significant
from dtgui.core.runs.run_state import RunState
from dtgui.core.sweeps.sweep import SweepSpec, parse_param, save_sweep
from dtgui.core.sweeps.sweep_study import (
    RERUN_ATTR,
    RESUMED_ATTR,
    open_study,
    parallel_coordinates,
    read_sweep,
)
from dtgui.ui.pages.sweep_view import SweepView, status_text

pytestmark = pytest.mark.gui

TRIALS = [  # lr, batch, state, objective
    (0.01, 32, TrialState.COMPLETE, 1.5),
    (0.0001, 16, TrialState.PRUNED, 2.2),
    (0.05, 64, TrialState.COMPLETE, 1.2),
    (0.1, 16, TrialState.FAIL, None),
    (0.002, 32, TrialState.COMPLETE, 1.8),
]


def make_sweep(folder: Path) -> SweepSpec:
    spec = SweepSpec(params=(parse_param("lr=loguniform:1e-4:1e-1"),
                             parse_param("batch-size=choice:16,32,64")), trials=6)
    save_sweep(folder, spec, Plan())
    remember_sweep(folder)  # listed, its trials under it, as `prepare_sweep` does
    study = open_study(spec, folder)
    study.set_user_attr("notes", ["6 trials at once were asked, but 4 group(s) of 1 free GPU(s) "
                                  "are on local, h100a: the other trials wait for one."])
    for lr, batch, state, value in TRIALS:
        study.enqueue_trial({"lr": lr, "batch-size": batch})
        trial = study.ask({"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True),
                           "batch-size": optuna.distributions.CategoricalDistribution(
                               [16, 32, 64])})
        run = folder / "trials" / f"t{trial.number}"
        run.mkdir(parents=True)
        RunRecord(run_id=f"t{trial.number}", run_name=f"t{trial.number}", bundle=str(run),
                  state=RunState.FINISHED).save()
        trial.set_user_attr("bundle", str(run))
        trial.set_user_attr("started", 100.0 + trial.number)
        trial.set_user_attr("ended", 130.0 + trial.number)
        trial.set_user_attr("machine", "local-1")
        if state is TrialState.FAIL:
            trial.set_user_attr("error", "worker:0 failed: out of memory")
        if state is TrialState.PRUNED and value is not None:
            trial.report(value, 3)
        study.tell(trial, value if state is TrialState.COMPLETE else None, state=state)
    return spec


def cell(view: SweepView, row: int, column: int) -> str:
    item = view.table.item(row, column)
    return item.text() if item is not None else ""


def test_parallel_coordinates_scale_every_axis_to_0_1(tmp_path: Path) -> None:
    make_sweep(tmp_path)
    table = read_sweep(tmp_path)
    axes, lines = parallel_coordinates(table.rows, table.spec.params)
    assert axes == ["lr", "batch-size", "objective"]
    assert len(lines) == 5
    values = [v for line in lines for v in line if v is not None]
    assert min(values) == 0.0 and max(values) == 1.0
    assert [r.params["lr"] for r in table.rows][:3] == [0.05, 0.01, 0.002]
    assert table.best is not None and table.best.objective == min(
        r.objective for r in table.rows if r.state == "finished" and r.objective is not None)


def test_a_running_trial_shows_how_far_its_run_has_come(tmp_path: Path) -> None:
    """The step a running trial's run has reached, read from the end of its events (its
    state cell: "running · step 120 of 300"); an ended trial is said by its end alone."""
    import json

    from dtgui.core.bundles.bundle import render_bundle
    from dtgui.core.plans.placement import place_local
    from dtgui.core.plans.strategies import Strategy
    from dtgui.core.sweeps.sweep_study import TrialRow, with_progress

    plan = place_local(Plan(run_name="t", strategy=Strategy.ONE_DEVICE, replicas_per_task=1,
                            steps=300))
    bundle = render_bundle(plan, tmp_path / "t000")
    events = bundle.events_file(plan.tasks[0])
    events.parent.mkdir(parents=True, exist_ok=True)
    events.write_text("".join(json.dumps(
        {"v": 2, "kind": "steps", "task": "worker:0", "t": 1.0 + i, "first": 1 + 40 * i,
         "count": 4, "stride": 10, "replica_ids": [0], "losses": "", "means": ""}) + "\n"
        for i in range(3)))
    running = TrialRow(0, "running", {}, None, None, None, "local-1", str(bundle.path), "",
                       1.0, None)
    shown = with_progress(running)
    assert (shown.step, shown.total_steps) == (111, 300)
    assert shown.state_text == "running · step 111 of 300"
    ended = TrialRow(1, "pruned", {}, 0.5, 50, 9.0, "local-1", str(bundle.path), "", 1.0,
                     10.0)
    assert with_progress(ended).state_text == "pruned"


def test_the_sweep_view_shows_the_trials_best_first(qtbot: QtBot, tmp_path: Path) -> None:
    make_sweep(tmp_path)
    view = SweepView()
    qtbot.addWidget(view)
    view.resize(1100, 800)
    view.show()
    view.open(tmp_path)
    qtbot.waitUntil(lambda: view.table.rowCount() == 5, timeout=60_000)
    data = view.table_data
    assert data is not None and data.best is not None
    assert cell(view, 0, 0) == str(data.best.number)
    states = [cell(view, i, 1) for i in range(5)]
    assert states[:3] == ["finished"] * 3 and states[3:] == ["pruned", "failed"]
    assert "5 of 6 trial(s) done: 3 finished, 1 pruned, 1 failed" in view.status.text()
    # each trial's value is its best one, as it says, in the digits every view uses
    header = view.table.horizontalHeaderItem(2)
    assert header is not None and header.text() == "best val_loss"
    assert cell(view, 0, 2) == significant(data.best.objective)
    assert f"best: trial {data.best.number} ({significant(data.best.objective)})" \
        in view.status.text()
    # a trial still running is not done
    one_running = replace(data, rows=[replace(data.rows[0], state="running"), *data.rows[1:]])
    assert status_text(one_running, running=True).startswith(
        "4 of 6 trial(s) done, 1 running: 2 finished, 1 pruned, 1 failed.")
    # user's words: the search, the goal, the slot; the trial ids alone number the rows
    assert "Bayesian search (TPE) for the lowest val_loss" in view.status.text()
    assert view.status.text().endswith("Not running.") and "process" not in view.status.text()
    assert status_text(data, running=True).endswith("it goes on if dtgui is closed.")
    assert status_text(data, running=True, in_process=False).endswith(
        "Running in dtgui: it stops when dtgui is closed.")
    assert cell(view, 0, 7) == "this machine #1" and view.table.verticalHeader().isHidden()
    # a wide page: every column takes a share of its width (not the last alone), none
    # narrower than its contents
    view.resize(1900, 800)
    qtbot.waitUntil(lambda: view.table.viewport().width() > 1700, timeout=10_000)
    columns = view.table.horizontalHeader()
    widths = [columns.sectionSize(c) for c in range(columns.count())]
    assert abs(sum(widths) - view.table.viewport().width()) <= columns.count()
    assert min(widths[:-1]) > 1.5 * view.table.sizeHintForColumn(0)  # the trial column grew
    assert all(w >= view.table.sizeHintForColumn(c) for c, w in enumerate(widths))
    scatter = view.scatter_tabs.widget(0)
    assert isinstance(scatter, pg.PlotWidget)
    assert not scatter.getAxis("left").autoSIPrefix  # 0.00035 as it is, not 350 "(x0.001)"
    assert "the other trials wait for one" in view.notes.text() and view.notes.isVisible()
    assert view.scatter_tabs.count() == 2
    assert len(view.parallel.getPlotItem().listDataItems()) == 5  # a line a trial
    assert view.best_button.isEnabled()

    with qtbot.waitSignal(view.openRequested, timeout=60_000) as opened:
        view.best_button.click()
    assert opened.args[0].run_id == f"t{data.best.number}"
    view.table.selectRow(0)
    with qtbot.waitSignal(view.compareRequested, timeout=60_000) as compared:
        view.compare_button.click()
    assert [r.run_id for r in compared.args[0]] == [f"t{data.best.number}"]

    out = tmp_path / "export.csv"
    view.export_csv(out)
    qtbot.waitUntil(out.exists, timeout=60_000)
    with out.open() as f:
        assert len(list(csv.DictReader(f))) == 5
    view.export_bundles(tmp_path / "bundles")  # the made-up trials' runs: their plans' bundles
    qtbot.waitUntil(lambda: "rerun them" in view.status.text(), timeout=60_000)
    view.open(tmp_path)  # shown again: what it is, not "Reading the sweep…"
    qtbot.waitUntil(lambda: "5 of 6 trial(s)" in view.status.text(), timeout=60_000)
    assert view.table_data is not None and view.best_button.isEnabled()
    assert sorted(p.name for p in (tmp_path / "bundles").glob("t*")) == [
        f"t{n:03d}" for n in range(5)]

    # a stopped trial (5) and the trial that continued its run from its checkpoint (6)
    qtbot.waitUntil(lambda: not view.session.following, timeout=60_000)  # its look ended
    study = open_study(read_sweep(tmp_path).spec, tmp_path)
    for number, state in ((5, TrialState.FAIL), (6, TrialState.COMPLETE)):
        trial = study.ask({"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)})
        trial.set_user_attr("bundle", str(tmp_path / "trials" / "t1"))
        if number == 5:
            trial.set_user_attr("error", "stopped")
        else:
            trial.set_user_attr(RERUN_ATTR, 5)
            trial.set_user_attr(RESUMED_ATTR, 40)
        study.tell(trial, 1.9 if number == 6 else None, state=state)
    view.open(tmp_path)
    qtbot.waitUntil(lambda: view.table.rowCount() == 7, timeout=60_000)
    rows = {cell(view, i, 0): i for i in range(7)}
    assert cell(view, rows["5"], 8) == "stopped; its run continues in trial 6"
    assert cell(view, rows["6"], 8) == ""
    view.table.clearSelection()
    for shown in ("5", "6"):
        view.table.selectionModel().select(
            view.table.model().index(rows[shown], 0),
            QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows)
    with qtbot.waitSignal(view.compareRequested, timeout=60_000) as compared:
        view.compare_button.click()
    assert [r.run_id for r in compared.args[0]] == ["t1"]  # their one run, once
    qtbot.waitUntil(lambda: not view.session.following, timeout=60_000)
    if os.environ.get("DTGUI_SCREENSHOTS"):
        shots = Path(os.environ["DTGUI_SCREENSHOTS"])
        view.grab().save(str(shots / "sweep-view.png"))
        view.parallel.parent().parent().setCurrentIndex(1)
        view.grab().save(str(shots / "sweep-view-scatter.png"))


def test_the_main_window_opens_a_sweep_and_compares_its_trials(qtbot: QtBot,
                                                               tmp_path: Path) -> None:
    from dtgui.ui.app import make_app
    from dtgui.ui.main_window import MainWindow

    make_sweep(tmp_path)
    make_app([])
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    window.open_sweep(tmp_path)
    view = window.sweep_view
    assert view is not None and window.pages.currentWidget() is view
    qtbot.waitUntil(lambda: view.table.rowCount() == 5, timeout=60_000)
    view.table.selectAll()
    view.compare_button.click()
    compare = window.compare
    assert compare is not None and window.pages.currentWidget() is compare
    qtbot.waitUntil(lambda: len(compare.summaries) == 5, timeout=60_000)
    window.open_sweep(tmp_path)
    view.closed.emit()
    assert window.pages.currentWidget() is window.runs_page


def test_the_wizard_sweeps_its_run_setup_set_up_in_a_form(qtbot: QtBot, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Sweep… on the wizard's review page: the form says each row's problem beside it (an
    inverted range, an argument the built-in loop cannot take); Start sweep starts the sweep
    of the wizard's plan and closes the wizard."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QDialogButtonBox, QWizard

    from dtgui.launch.sweeps import sweep_process
    from dtgui.ui.app import make_app
    from dtgui.ui.dialogs.sweep_dialog import SweepDialog
    from dtgui.ui.dialogs.sweep_param_row import LIST, LOG_RANGE, RANGE
    from dtgui.ui.main_window import MainWindow
    from dtgui.ui.wizard.wizard import PAGE_REVIEW

    started: list[tuple[Path, SweepSpec, Plan]] = []

    def start(folder: Path, spec: SweepSpec, plan: Plan) -> int:
        started.append((folder, spec, plan))
        return 1

    monkeypatch.setattr(sweep_process, "start_sweep", start)
    make_app([])
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    window.open_wizard()
    wizard = window.wizard
    assert wizard is not None
    while wizard.currentId() != PAGE_REVIEW:
        wizard.next()
    sweep = wizard.button(QWizard.WizardButton.CustomButton2)
    assert sweep.isVisible() and sweep.isEnabled() and sweep.text() == "Sweep…"
    sweep.click()
    dialog = wizard.findChild(SweepDialog)
    assert dialog is not None and dialog.base_plan == wizard.plan()
    ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
    assert ok is not None
    lr, batch = dialog.param_rows
    assert (lr.name(), batch.name()) == ("lr", "batch-size")
    lr.low.setText("0.1")
    lr.high.setText("0.001")
    assert "inverted" in lr.error.text() and lr.error.isVisibleTo(dialog)
    assert not ok.isEnabled()
    lr.high.setText("0.5")
    assert lr.error.text() == ""
    # problems in the form's words, not in the command line's syntax
    lr.space.setCurrentText(LIST)
    assert lr.error.text() == "Learning rate: type its values, separated by commas."
    assert "0.0001, 0.001" in lr.values.placeholderText()
    lr.values.setText("0.1, x")
    assert lr.error.text() == "Learning rate: 'x' is not a number."
    lr.values.setText("0.1, 0.1")
    assert lr.error.text() == "Learning rate: a value is listed twice."
    lr.space.setCurrentText(LOG_RANGE)
    lr.low.setText("0.5")
    assert "the lowest must be below the highest" in lr.error.text()
    assert ":" not in lr.error.text().partition(": ")[2]  # no LOW:HIGH, no choice:A,B
    lr.low.setText("0.1")
    assert lr.error.text() == ""
    # a grid trains every value unless a pruner is chosen; a search prunes by the median
    assert dialog.pruner_box.currentData() == "median"
    dialog.search_box.setCurrentIndex(dialog.search_box.findData("grid"))
    assert dialog.pruner_box.currentData() == "none"
    # a grid's trials are its combinations: the count follows the grid and says so
    assert dialog.trials_label.text() == "trials,"  # a log range: no grid to count
    lr.space.setCurrentText(LIST)
    lr.values.setText("0.001, 0.01, 0.1")
    assert dialog.trials_spin.value() == 9  # 3 rates × 3 batch sizes
    assert dialog.trials_label.text() == "trials (the grid has 9 combinations),"
    lr.space.setCurrentText(LOG_RANGE)
    dialog.search_box.setCurrentIndex(dialog.search_box.findData("tpe"))
    assert dialog.pruner_box.currentData() == "median"
    arg = dialog.add_param()
    arg.setting.setCurrentIndex(arg.setting.findData("arg"))
    assert "Type the name" in arg.error.text()
    arg.name_edit.setText("dropout")
    assert "cannot take it" in arg.error.text() and not ok.isEnabled()
    arg.remove.click()
    batch.space.setCurrentText(RANGE)
    batch.number.setCurrentText("int")
    batch.low.setText("16")
    batch.high.setText("64")
    # a new folder by default, under the sweeps folder, named after the setup
    default = dialog.folder()
    assert default is not None and default.name == f"{wizard.plan().run_name}-sweep"
    assert dialog.problems_now() == []
    dialog.folder_edit.setText("")
    assert "Choose the sweep's folder" in dialog.problems.text()
    here = dialog.machines_list.item(0)
    assert here is not None and here.text() == "this machine"
    assert dialog.machines_list.trial_on() == []
    here.setCheckState(Qt.CheckState.Unchecked)
    assert "Check at least one machine" in dialog.problems.text()
    here.setCheckState(Qt.CheckState.Checked)
    dialog.folder_edit.setText(str(tmp_path / "sweep"))
    dialog.parallel_spin.setValue(4)
    assert dialog.problems_now() == [] and ok.isEnabled()
    assert not cut_texts(dialog), cut_texts(dialog)  # nothing of the form is cut
    if os.environ.get("DTGUI_SCREENSHOTS"):
        dialog.grab().save(str(Path(os.environ["DTGUI_SCREENSHOTS"]) / "sweep-dialog.png"))
    ok.click()
    qtbot.waitUntil(lambda: bool(started), timeout=60_000)
    folder, spec, plan = started[0]
    view = window.sweep_view
    assert folder == tmp_path / "sweep" and view is not None and view.folder == folder
    assert window.pages.currentWidget() is view
    assert [p.to_text() for p in spec.params] == ["lr=loguniform:0.1:0.5", "batch-size=int:16:64"]
    assert (spec.parallel, spec.objective, plan) == (4, "val_loss", dialog.base_plan)
    assert not wizard.isVisible()


def test_the_dialog_says_how_many_gpu_trials_the_machines_take_at_once(qtbot: QtBot) -> None:
    """By the machines' last GPU figures (nothing is asked): a busy GPU is not counted; more
    trials at once than free GPUs is said (they wait), not refused."""
    from PySide6.QtCore import Qt

    from dtgui.core.machines.hardware import GpuInfo
    from dtgui.core.plans.strategies import Strategy
    from dtgui.ui.dialogs.sweep_dialog import SweepDialog

    gib = 1 << 30
    idle, busy = (GpuInfo(0, "H100", 80 * gib, 0, 0.0), GpuInfo(1, "H100", 80 * gib, gib, 97.0))
    plan = Plan(device_kind=DeviceKind.GPU, strategy=Strategy.ONE_DEVICE, replicas_per_task=1)
    dialog = SweepDialog(plan, machines=["h100a"],
                         gpus={"local": [idle, busy],
                               "h100a": [idle, GpuInfo(1, "H100", 80 * gib, 0, 0.0)]})
    qtbot.addWidget(dialog)
    here, remote = dialog.machines_list.item(0), dialog.machines_list.item(1)
    assert here is not None and remote is not None
    assert here.text() == "this machine — 1 of 2 GPU(s) free"
    assert remote.text() == "h100a — 2 of 2 GPU(s) free"
    dialog.parallel_spin.setValue(4)
    assert "4 trials at once were asked, but the machines checked have 1 group(s)" in \
        dialog.capacity.text()
    remote.setCheckState(Qt.CheckState.Checked)
    assert dialog.machines_list.trial_on() == ["local", "h100a"]
    assert "have 3 group(s) of 1 free GPU(s)" in dialog.capacity.text()
    dialog.parallel_spin.setValue(3)
    assert dialog.capacity.text() == "" and dialog.capacity.isHidden()


def test_the_dialog_offers_a_slurm_cluster_whose_jobs_are_the_trials(
        qtbot: QtBot, tmp_path: Path) -> None:
    """A registered cluster is offered in "Trials run on", checked alone: the sweep's trials
    are jobs there, a task a node, with the cluster's defaults (kept in sweep.json)."""
    from PySide6.QtCore import Qt

    from dtgui.core.machines.registry import Machine, MachineRegistry
    from dtgui.core.plans.strategies import Strategy
    from dtgui.kinds.slurm.job import SlurmDefaults, SlurmJob
    from dtgui.launch.gpus.free_slots import job_slots
    from dtgui.ui.dialogs.sweep_dialog import SweepDialog

    cluster = Machine(name="hpc", host="login.example.org", user="me", python="/opt/py/bin/python",
                      kind="slurm", settings=SlurmDefaults(partition="gpu", time_limit="01:00:00"))
    plan = Plan(run_name="mw", strategy=Strategy("multi_worker_mirrored"), workers=2,
                replicas_per_task=1)
    dialog = SweepDialog(plan, folder=tmp_path / "s", machines=["gpu1"], job_machines=[cluster])
    qtbot.addWidget(dialog)
    dialog.set_params(["lr=loguniform:1e-4:1e-1"])
    item = dialog.machines_list.item(2)
    assert item is not None and item.text() == "Slurm cluster hpc (a job a trial)"
    item.setCheckState(Qt.CheckState.Checked)  # with this machine still checked
    assert "hpc takes every trial" in dialog.problems.text()
    here = dialog.machines_list.item(0)
    assert here is not None
    here.setCheckState(Qt.CheckState.Unchecked)
    assert dialog.problems_now() == []
    spec = dialog.spec()
    assert dialog.machines_list.trial_on() == [] and spec.trial_on == ()
    job = spec.job
    assert isinstance(job, SlurmJob) and (job.cluster, job.nodes, job.tasks_per_node) == ("hpc", 2, 1)
    assert (job.partition, job.time_limit, job.python) == ("gpu", "01:00:00",
                                                            "/opt/py/bin/python")
    dialog.parallel_spin.setValue(3)
    registry = MachineRegistry(tmp_path / "machines.toml")
    registry.add(cluster)
    slots = job_slots(plan, job, dialog.spec().parallel, registry)
    assert [s.name for s in slots] == ["hpc job #1", "hpc job #2", "hpc job #3"]
    assert all(s.targets[0].job == job and s.targets[0].machine == cluster for s in slots)



def test_the_dialog_offers_the_machines_any_kind_owns_and_keeps_its_job(
        qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind registered by this test alone (its driver owns one registered machine): the
    dialog offers that machine with the driver's text, the sweep's job is the driver's, and
    sweep.json keeps it by its kind and reads it back through the driver."""
    from dataclasses import asdict, dataclass
    from typing import Any

    from PySide6.QtCore import Qt

    from dtgui.core.machines.registry import Machine
    from dtgui.core.sweeps.sweep import load_sweep
    from dtgui.launch.drivers import DRIVERS, Driver, job_readers
    from dtgui.ui.dialogs.sweep_dialog import SweepDialog

    @dataclass(frozen=True)
    class FarmJob:
        machine: str
        slots: int

        @property
        def kind(self) -> str:
            return "farm"

        def to_dict(self) -> dict[str, Any]:
            return asdict(self)

    class FarmDriver(Driver):
        kind = "farm"

        def trial_job(self, plan: Plan, machine: Machine) -> FarmJob:
            return FarmJob(machine.name, plan.workers)

        def trial_target_text(self, machine: Machine) -> str:
            return f"the farm at {machine.host}"

        def job_from_dict(self, data: dict[str, Any]) -> FarmJob:
            return FarmJob(str(data["machine"]), int(data["slots"]))

    monkeypatch.setitem(DRIVERS, FarmDriver.kind, FarmDriver())
    farm = Machine(name="farm1", host="farm.example.org", user="me", kind="farm")
    dialog = SweepDialog(Plan(workers=3), folder=tmp_path / "s", job_machines=[farm])
    qtbot.addWidget(dialog)
    dialog.set_params(["lr=loguniform:1e-4:1e-1"])
    here, item = dialog.machines_list.item(0), dialog.machines_list.item(1)
    assert here is not None and item is not None
    assert item.text() == "the farm at farm.example.org"
    item.setCheckState(Qt.CheckState.Checked)
    here.setCheckState(Qt.CheckState.Unchecked)
    spec = dialog.spec()
    assert spec.job == FarmJob("farm1", 3) and spec.trial_on == ()
    save_sweep(tmp_path / "s", spec, Plan(workers=3))
    assert load_sweep(tmp_path / "s", job_readers())[0].job == FarmJob("farm1", 3)
