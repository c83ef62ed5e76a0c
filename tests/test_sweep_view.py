"""The sweep view over a sweep folder (its study written with Optuna here: no runs): the table
best first, the parallel-coordinates plot, a scatter per parameter, Compare of the selected
trials, the best run, the CSV."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from pytestqt.qtbot import QtBot

from dtgui.core.plan import Plan
from dtgui.core.run_state import RunState
from dtgui.core.runs import RunRecord
from dtgui.core.sweep import SweepSpec, parse_param, save_sweep
from dtgui.core.sweep_study import open_study, parallel_coordinates, read_sweep
from dtgui.ui.sweep_view import SweepView

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
    study = open_study(spec, folder)
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


def test_the_sweep_view_shows_the_trials_best_first(qtbot: QtBot, tmp_path: Path) -> None:
    make_sweep(tmp_path)
    view = SweepView()
    qtbot.addWidget(view)
    view.resize(1100, 800)
    view.show()
    view.open(tmp_path)
    qtbot.waitUntil(lambda: view.table.rowCount() == 5, timeout=20_000)
    data = view.table_data
    assert data is not None and data.best is not None
    assert cell(view, 0, 0) == str(data.best.number)
    states = [cell(view, i, 1) for i in range(5)]
    assert states[:3] == ["finished"] * 3 and states[3:] == ["pruned", "failed"]
    assert "5 of 6 trial(s)" in view.status.text()
    assert view.scatter_tabs.count() == 2
    assert len(view.parallel.getPlotItem().listDataItems()) == 5  # a line a trial
    assert view.best_button.isEnabled()

    with qtbot.waitSignal(view.openRequested, timeout=5000) as opened:
        view.best_button.click()
    assert opened.args[0].run_id == f"t{data.best.number}"
    view.table.selectRow(0)
    with qtbot.waitSignal(view.compareRequested, timeout=5000) as compared:
        view.compare_button.click()
    assert [r.run_id for r in compared.args[0]] == [f"t{data.best.number}"]

    out = tmp_path / "export.csv"
    view.export_csv(out)
    qtbot.waitUntil(out.exists, timeout=10_000)
    with out.open() as f:
        assert len(list(csv.DictReader(f))) == 5
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
    qtbot.waitUntil(lambda: view.table.rowCount() == 5, timeout=20_000)
    view.table.selectAll()
    view.compare_button.click()
    compare = window.compare
    assert compare is not None and window.pages.currentWidget() is compare
    qtbot.waitUntil(lambda: len(compare.summaries) == 5, timeout=20_000)
    window.open_sweep(tmp_path)
    view.closed.emit()
    assert window.pages.currentWidget() is window.runs_page
