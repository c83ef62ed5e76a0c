"""Compare runs with real widgets: three finished runs written as the training program writes
them, selected in the Runs page, compared (curves by step and by wall time, the table), and
exported as CSV and PNG."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QItemSelectionModel, Qt
from PySide6.QtGui import QImage
from pytestqt.qtbot import QtBot
from training_events import AGAIN_SHIFT, T0, write_run
from widgets import cell, cell_text

from dtgui.core.runs.compare import FIELDS, MISSING, summarize_run, summary_csv
from dtgui.core.runs.records import RunRecord
from dtgui.core.settings import runs_dir
from dtgui.core.smoothing import ema
from dtgui.ui.compare import CompareView
from dtgui.ui.pages.runs_page import RunsPage

pytestmark = pytest.mark.gui


@pytest.fixture
def three_runs() -> list[RunRecord]:
    root = runs_dir()
    return [
        write_run(root, "adam-fast", plan_fields={"optimizer": "adam", "lr_schedule": "constant"},
                  rate=0.05, seconds_per_step=0.05, examples_per_sec=1280, created=T0, seed=1),
        write_run(root, "sgd-cosine", plan_fields={"optimizer": "sgd", "momentum": 0.9,
                                                   "lr_schedule": "cosine"},
                  rate=0.02, seconds_per_step=0.02, examples_per_sec=3200, created=T0 + 60,
                  seed=2),
        # a run from before optimizers could be chosen, without validation
        write_run(root, "old-run", drop_fields=("optimizer", "lr_schedule", "weight_decay",
                                                "momentum"),
                  validation=False, created=T0 + 120, seed=3),
    ]


def test_summary_of_a_run_reads_curves_and_results(three_runs: list[RunRecord]) -> None:
    s = summarize_run(three_runs[0].bundle, "adam-fast", "finished")
    assert len(s.loss) == 120 and s.loss.steps[0] == 1 and s.loss.steps[-1] == 120
    assert np.all(np.diff(s.loss.seconds) >= 0)
    assert s.loss.seconds[-1] == pytest.approx(2.0 + 120 * 0.05 + 2 * 0.4, abs=0.05)
    assert s.throughput == pytest.approx(1280)
    assert s.optimizer == "Adam" and s.schedule == "0.01, constant"  # it says it stays
    assert list(s.validation["loss"].steps) == [40, 80, 120]
    assert s.best_val_loss is not None and s.best_val_loss[1] == 80  # it rises after epoch 2
    assert s.best_val_metric is not None and s.best_val_metric[0] == "accuracy"
    assert s.best_val_metric[2] == 80  # epoch 3's accuracy dips
    old = summarize_run(three_runs[2].bundle, "old-run")
    assert old.optimizer == "" and old.best_val_loss is None and not old.validation


def test_a_run_restarted_from_a_checkpoint_continues_from_the_resumed_step(
        tmp_path: Path) -> None:
    """After a restart the steps after the checkpoint are trained again: the curve keeps the
    second pass (as the dashboard does), and its wall time goes on growing."""
    record = write_run(tmp_path, "restarted", steps=80, steps_per_epoch=40, seed=8,
                       restart=(60, 40))
    s = summarize_run(record.bundle, "restarted")
    assert s.loss.steps.tolist() == list(range(1, 81))
    assert np.all(np.diff(s.loss.seconds) >= 0)
    assert s.loss.seconds[-1] > 2.0 + 100 * 0.05 + 5.0  # 100 steps trained, the restart
    assert np.all(s.loss.values[40:] > AGAIN_SHIFT)  # the second pass
    assert list(s.validation["loss"].steps) == [40, 80]
    assert s.final_loss == pytest.approx(record.final_loss)


def test_csv_has_one_row_per_run_with_plain_numbers(three_runs: list[RunRecord]) -> None:
    summaries = [summarize_run(r.bundle, r.run_name, r.state) for r in three_runs]
    rows = list(csv.DictReader(io.StringIO(summary_csv(summaries))))
    assert [r["run"] for r in rows] == ["adam-fast", "sgd-cosine", "old-run"]
    assert rows[1]["optimizer"] == "SGD (momentum 0.9)"
    assert rows[1]["schedule"] == "0.01, cosine decay"
    assert rows[2]["optimizer"] == "" and rows[2]["best_val_loss"] == ""
    assert float(rows[0]["examples_per_sec_median"]) == pytest.approx(1280)
    assert rows[0]["global_batch"] == "64" and rows[0]["replicas"] == "2"
    assert rows[0]["xla"] == "false" and rows[0]["steps_done"] == "120"
    assert float(rows[0]["final_loss"]) == pytest.approx(summaries[0].final_loss)
    best = summaries[0].best_val_loss
    assert best is not None and float(rows[0]["best_val_loss"]) == pytest.approx(best[0])
    assert rows[0]["best_val_loss_step"] == "80"
    assert rows[0]["best_val_metric"] == "accuracy"


def test_runs_page_compares_the_selected_runs(
        qtbot: QtBot, three_runs: list[RunRecord], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    page = RunsPage()
    qtbot.addWidget(page)
    page.refresh()
    qtbot.waitUntil(lambda: page.row_count() == 3, timeout=5000)
    assert not page.buttons.compare_button.isEnabled()
    page.table.selectRow(0)
    assert page.buttons.open_button.isEnabled() and not page.buttons.compare_button.isEnabled()
    model = page.table.selectionModel()
    for row in (1, 2):
        model.select(page.table.model().index(row, 0),
                     QItemSelectionModel.SelectionFlag.Select
                     | QItemSelectionModel.SelectionFlag.Rows)
    assert page.buttons.compare_button.isEnabled() and not page.buttons.open_button.isEnabled()
    with qtbot.waitSignal(page.compareRequested) as got:
        qtbot.mouseClick(page.buttons.compare_button, Qt.MouseButton.LeftButton)
    chosen = got.args[0]
    assert [r.run_name for r in chosen] == ["old-run", "sgd-cosine", "adam-fast"]

    view = CompareView()
    qtbot.addWidget(view)
    view.resize(1300, 900)
    view.show()
    with qtbot.waitSignal(view.loaded, timeout=10000):
        view.load(chosen)
    # curves: training loss for each run, validation loss (dashed) for the two that validate
    keys = set(view.plot.curves)
    assert {(n, "train") for n in ("old-run", "sgd-cosine", "adam-fast")} <= keys
    assert ("adam-fast", "val") in keys and ("old-run", "val") not in keys
    val = view.plot.curves[("adam-fast", "val")]
    assert val.opts["pen"].style() == Qt.PenStyle.DashLine
    x, y = view.plot.curves[("adam-fast", "train")].getOriginalDataset()
    assert x[-1] == 120
    # smoothed as the dashboard smooths (0.6), the raw points faint behind
    summary = next(s for s in view.summaries if s.name == "adam-fast")
    np.testing.assert_allclose(y, ema(summary.loss.values, 0.6))
    _x, raw = view.plot.curves[("adam-fast", "raw")].getOriginalDataset()
    np.testing.assert_allclose(raw, summary.loss.values)
    view.smoothing.setValue(0)
    assert ("adam-fast", "raw") not in view.plot.curves
    _x, y = view.plot.curves[("adam-fast", "train")].getOriginalDataset()
    np.testing.assert_allclose(y, summary.loss.values)
    view.set_axis_mode("time")
    x, _y = view.plot.curves[("adam-fast", "train")].getOriginalDataset()
    assert x[-1] == pytest.approx(8.8, abs=0.05)  # seconds since its first event
    assert view.by_time.isChecked()
    assert view.plot.plot.getAxis("bottom").tickStrings([65.0], 1, 10) == ["1:05"]
    x, _y = view.plot.curves[("sgd-cosine", "train")].getOriginalDataset()
    assert x[-1] == pytest.approx(2.0 + 120 * 0.02 + 0.8, abs=0.05)  # faster per step
    view.set_axis_mode("step")
    assert view.plot.plot.getAxis("bottom").labelText == "step"
    # the table: one column per run, a row per field, "—" where a run has nothing
    assert view.table.columnCount() == 3
    headers = [view.table.horizontalHeaderItem(c) for c in range(3)]
    assert [h.text() if h is not None else None for h in headers] == [
        "old-run", "sgd-cosine", "adam-fast"]
    field_row = {name: view.row_of(name) for name in FIELDS[1:]}
    assert view.table.rowCount() == len(FIELDS) - 1  # the run's name heads its column
    for name, row in field_row.items():  # each row says what it means
        head = view.table.verticalHeaderItem(row)
        assert head is not None and head.text() == name and head.toolTip(), name
    assert cell(view.table, field_row["Learning rate"], 1).text().endswith(
        ("constant", "cosine decay", "then cosine", "steps"))
    assert cell(view.table, field_row["Optimizer"], 0).text() == MISSING
    assert cell(view.table, field_row["Optimizer"], 1).text() == "SGD (momentum 0.9)"
    assert cell(view.table, field_row["Throughput (examples/s)"], 1).text() == "3,200"
    assert cell(view.table, field_row["Best validation loss"], 2).text().endswith("(step 80)")
    best_metric = cell_text(view.table, field_row["Best validation metric"], 2)
    assert best_metric.startswith("accuracy 0.") and best_metric.endswith("(step 80)")

    # exports through the save dialogs (answered here), written off the UI thread
    answers = iter([tmp_path / "table.csv", tmp_path / "plot.png"])
    monkeypatch.setattr(view, "ask_save_path", lambda *a: next(answers))
    with qtbot.waitSignal(view.exported, timeout=5000):
        qtbot.mouseClick(view.csv_button, Qt.MouseButton.LeftButton)
    text = (tmp_path / "table.csv").read_text()
    assert text == summary_csv(view.summaries)
    assert text.splitlines()[1].startswith("old-run,finished,mirrored,local,2,")
    with qtbot.waitSignal(view.exported, timeout=5000):
        qtbot.mouseClick(view.png_button, Qt.MouseButton.LeftButton)
    image = QImage(str(tmp_path / "plot.png"))
    assert not image.isNull() and image.width() == 1600 and image.height() > 300
    assert "plot.png" in view.status.text()


@pytest.mark.slow
def test_a_real_training_run_is_compared_with_its_validation_and_saved_model(
        qtbot: QtBot, tmp_path: Path) -> None:
    """A real (tiny) TensorFlow run exported and run by hand, as the bundle's README says,
    then found in the Runs page (a bundle without a run record) and compared."""
    import os
    import subprocess
    import sys

    bundle = runs_dir() / "real-sgd"
    subprocess.run([sys.executable, "-m", "dtgui", "export", str(bundle), "--strategy",
                    "mirrored", "--replicas", "2", "--steps", "40", "--steps-per-epoch", "20",
                    "--optimizer", "sgd", "--lr-schedule", "cosine", "--save-best",
                    "--run-name", "real-sgd"], check=True, capture_output=True, timeout=120)
    done = subprocess.run(["bash", "run.sh"], cwd=bundle, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHON": sys.executable})
    assert done.returncode == 0, done.stdout + done.stderr
    write_run(runs_dir(), "written", created=T0, seed=7)
    page = RunsPage()
    qtbot.addWidget(page)
    page.refresh()
    qtbot.waitUntil(lambda: page.row_count() == 2, timeout=5000)
    page.table.selectAll()
    with qtbot.waitSignal(page.compareRequested) as got:
        qtbot.mouseClick(page.buttons.compare_button, Qt.MouseButton.LeftButton)
    view = CompareView()
    qtbot.addWidget(view)
    with qtbot.waitSignal(view.loaded, timeout=10000):
        view.load(got.args[0])
    real = next(s for s in view.summaries if s.name == "real-sgd")
    assert real.state == "finished" and real.steps_done == 40 and len(real.loss) == 40
    assert list(real.validation["loss"].steps) == [20, 40]
    assert real.best_val_loss is not None and real.best_val_metric is not None
    assert real.best_val_metric[0] == "accuracy"
    assert real.optimizer.startswith("SGD") and real.schedule.endswith("cosine decay")
    assert real.throughput is not None and real.throughput > 0
    assert ("real-sgd", "val") in view.plot.curves
    col = [s.name for s in view.summaries].index("real-sgd")
    assert cell(view.table, view.row_of("Optimizer"), col).text().startswith("SGD")
    assert (bundle / "output" / "model" / "best" / "model.keras").is_file()


def test_main_window_opens_the_compare_view_from_runs_and_goes_back(
        qtbot: QtBot, three_runs: list[RunRecord], monkeypatch: pytest.MonkeyPatch) -> None:
    from dtgui.ui.main_window import MainWindow
    from dtgui.ui.pages.local_machine import LocalMachinePanel

    monkeypatch.setattr(LocalMachinePanel, "refresh", lambda self: None)  # no TensorFlow probe
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    window.show_runs()
    page = window.runs_page
    qtbot.waitUntil(lambda: page.row_count() == 3, timeout=5000)
    page.table.selectAll()
    qtbot.mouseClick(page.buttons.compare_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.compare is not None, timeout=5000)  # records read first
    view = window.compare
    assert view is not None and window.pages.currentWidget() is view
    qtbot.waitUntil(lambda: view.table.columnCount() == 3, timeout=10000)
    qtbot.mouseClick(view.back_button, Qt.MouseButton.LeftButton)
    assert window.pages.currentWidget() is page
