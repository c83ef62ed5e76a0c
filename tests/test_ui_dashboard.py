"""The live dashboard, fed by a real LiveRun with real parsed events (pytest-qt)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from widgets import cell, click_stop

from dtgui.ui.plots.curves import XY

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest
from cut_text import cut_labels
from fakes import FakeRun, event
from PySide6.QtCore import QPoint, Qt, QTimer
from PySide6.QtGui import QColor
from pytestqt.qtbot import QtBot

from dtgui.core.events import Event
from dtgui.core.live_run import LiveRun
from dtgui.core.measure.stragglers import describe_straggler, find_stragglers
from dtgui.core.run_tasks import TaskState
from dtgui.core.runs.run_state import RunState
from dtgui.core.task_logs import IN_WORDS, LOG_LINES_KEPT
from dtgui.ui.pages.dashboard import Dashboard
from dtgui.ui.pages.run_widgets import (
    FAILED_ROW_FG,
    SLOW_ROW_BG,
    SLOW_ROW_FG,
    TaskTable,
    epoch_text,
)
from dtgui.ui.pages.state_colours import STATE_COLOURS
from dtgui.ui.plots.curves import ENVELOPE_MIN_POINTS, Envelope
from dtgui.ui.plots.plot_base import ElapsedAxis, series_colour
from dtgui.ui.run_session import RunSession

pytestmark = pytest.mark.gui

LEFT = Qt.MouseButton.LeftButton
TF_DATA_IN_WORDS = IN_WORDS[0][1]


def ev(kind: str, task: str = "worker:0", t: float = 1000.0, **fields: Any) -> Event:
    """An event of the first schema (a `step` event each step), which the readers still take."""
    return event(kind, task, t, v=1, **fields)


def loss(rid: int, step: int) -> float:
    return 2.0 / step + 0.1 * rid


def steps(first: int, last: int, task: str = "worker:0", ids: tuple[int, ...] = (0, 1)
          ) -> list[Event]:
    out = []
    for s in range(first, last + 1):
        losses = [loss(r, s) for r in ids]
        out.append(ev("step", task, 1000.0 + s, step=s, epoch=1 + s // 10,
                      replica_losses=losses, replica_ids=list(ids),
                      loss=sum(losses) / len(losses), examples_per_sec=100.0 + s))
    return out


def two_workers(first: int, last: int) -> list[Event]:
    return steps(first, last, "worker:0", (0, 1)) + steps(first, last, "worker:1", (2, 3))


def started(task: str, ids: list[int], total: int = 100) -> Event:
    return ev("started", task, replicas=len(ids), replica_ids=ids, steps=total,
              strategy="multi_worker_mirrored")


@pytest.fixture
def metrics() -> LiveRun:
    m = LiveRun(100)
    m.add_events([started("worker:0", [0, 1]), started("worker:1", [2, 3])])
    return m


@pytest.fixture
def controller(metrics: LiveRun) -> FakeRun:
    return FakeRun(metrics)


@pytest.fixture
def dash(qtbot: QtBot) -> Iterator[Dashboard]:
    d = Dashboard()
    d.loss_panel.set_smoothing(0)  # these tests compare the drawn curves with the raw losses
    qtbot.addWidget(d)
    d.resize(1200, 800)
    d.show()
    yield d
    d.detach()


def follow(dash: Dashboard, run: FakeRun) -> RunSession:
    """Show `run` as the app does: the run's life (state, end) comes from a RunSession."""
    session = RunSession(parent=dash)
    dash.listen(session)
    session.started.connect(dash.attach)
    session.show(run)
    return session


def curve_xy(dash: Dashboard, rid: int) -> tuple[np.ndarray, np.ndarray]:
    """What the loss plot draws for a replica (its points, or its envelope's)."""
    return dash.loss_panel.curves.shown_data(rid)


def test_one_curve_per_replica_with_its_data_after_the_timer(
        qtbot: QtBot, dash: Dashboard, controller: FakeRun, metrics: LiveRun) -> None:
    dash.attach(controller, run_name="r1", strategy="multi_worker_mirrored")
    assert dash.timer.isActive() and dash.timer.interval() == 50
    metrics.add_events(two_workers(1, 20))  # after attach: only the timer can show them
    qtbot.waitUntil(lambda: dash.loss_panel.replica_ids() == [0, 1, 2, 3], timeout=3000)
    qtbot.waitUntil(lambda: len(curve_xy(dash, 3)[0]) == 20, timeout=3000)
    for rid in range(4):
        x, y = curve_xy(dash, rid)
        np.testing.assert_array_equal(x, np.arange(1, 21))
        np.testing.assert_allclose(y, [loss(rid, s) for s in range(1, 21)])
    colours = {dash.loss_panel.curves.curves[r].opts["pen"].color().name() for r in range(4)}
    assert len(colours) == 4
    labels = [label.text for _sample, label in dash.loss_panel.legend.items]
    assert labels == ["replica 0", "replica 1", "replica 2", "replica 3"]
    assert set(dash.throughput_panel.curves.curves) == {"worker:0", "worker:1"}
    qtbot.waitUntil(lambda: not dash.backlog, timeout=3000)  # a busy machine: later frames
    _tx, ty = dash.throughput_panel.curves.shown_data("worker:1")
    np.testing.assert_allclose(ty, 100.0 + np.arange(1, 21))
    # the header follows the metrics (its text at most 4 times a second)
    assert dash.header.name_label.text() == "r1"
    qtbot.waitUntil(lambda: dash.header.progress.value() == 20, timeout=3000)
    assert "20" in dash.header.step_label.text()
    assert STATE_COLOURS["running"] in dash.header.state_label.styleSheet()

    metrics.add_events([ev("device", "worker:0", 1010.0, devices=[
        {"kind": "cpu", "index": 0, "name": "x", "util": 55.0, "mem_used": 512 * 2**20,
         "mem_total": 2**34}])])
    qtbot.waitUntil(lambda: "worker:0 cpu0" in dash.device_panel.util.curves, timeout=3000)
    assert "CPU" in dash.device_panel.title_label.text()
    _x, util = dash.device_panel.util.shown_data("worker:0 cpu0")
    assert list(util) == [55.0]
    assert dash.device_panel.mem.last["worker:0 cpu0"] == 512.0
    # stopped, then resumed a minute later: a gap on the chart, not a line across the pause
    metrics.add_events([cpu_device("worker:0", 1012.0, 60.0),
                        cpu_device("worker:0", 1075.0, 70.0),
                        cpu_device("worker:0", 1077.0, 72.0)])
    qtbot.waitUntil(lambda: len(dash.device_panel.util.shown_data("worker:0 cpu0")[1]) == 5,
                    timeout=3000)
    x, util = dash.device_panel.util.shown_data("worker:0 cpu0")
    assert np.isnan(util[2]) and x[1] < x[2] < x[3]  # in the pause
    np.testing.assert_allclose(util[[0, 1, 3, 4]], [55.0, 60.0, 70.0, 72.0])
    assert dash.device_panel.util.curves["worker:0 cpu0"].opts["connect"] == "finite"
    assert dash.device_panel.util.last["worker:0 cpu0"] == 72.0


def test_checkboxes_and_legend_show_and_hide_replicas(
        qtbot: QtBot, dash: Dashboard, controller: FakeRun, metrics: LiveRun) -> None:
    metrics.add_events(two_workers(1, 10))
    dash.attach(controller)
    panel = dash.loss_panel
    qtbot.waitUntil(lambda: len(panel.replica_ids()) == 4, timeout=3000)
    # every series is fed within a frame budget: hide replica 1 once its 10 points are drawn
    qtbot.waitUntil(lambda: len(curve_xy(dash, 1)[0]) == 10, timeout=3000)
    chip = panel._chips[1]
    chip.setChecked(False)
    assert not panel.curves.curves[1].isVisible()
    assert not panel.is_replica_visible(1)
    # a hidden curve gets no data; shown again, it gets everything it missed
    metrics.add_events(two_workers(11, 15))
    qtbot.waitUntil(lambda: len(curve_xy(dash, 0)[0]) == 15, timeout=3000)
    assert len(curve_xy(dash, 1)[0]) == 10
    chip.setChecked(True)
    assert panel.curves.curves[1].isVisible() and len(curve_xy(dash, 1)[0]) == 15

    # a real click on replica 2's legend sample (pyqtgraph 0.14 toggles the curve itself)
    sample = next(s for s, label in panel.legend.items if label.text == "replica 2")
    view = panel.plot_widget
    qtbot.waitUntil(lambda: sample.isVisible(), timeout=3000)
    pos = view.mapFromScene(sample.sceneBoundingRect().center())
    qtbot.mouseClick(view.viewport(), LEFT, pos=QPoint(pos.x(), pos.y()))
    qtbot.waitUntil(lambda: not panel.curves.curves[2].isVisible(), timeout=3000)
    assert not panel._chips[2].isChecked()  # the checkbox follows the legend
    qtbot.mouseClick(view.viewport(), LEFT, pos=QPoint(pos.x(), pos.y()))
    qtbot.waitUntil(lambda: panel.curves.curves[2].isVisible(), timeout=3000)
    assert panel._chips[2].isChecked()

    panel.set_all_visible(True, only=3)
    assert [panel.is_replica_visible(r) for r in range(4)] == [False, False, False, True]
    panel.set_all_visible(True)
    assert all(panel.is_replica_visible(r) for r in range(4))


def test_failed_task_row_is_red_with_its_error(
        qtbot: QtBot, dash: Dashboard, controller: FakeRun, metrics: LiveRun) -> None:
    metrics.add_events(two_workers(1, 5))
    follow(dash, controller)
    error = "ResourceExhaustedError: OOM when allocating tensor"
    metrics.add_events([ev("failed", "worker:1", 1006.0, error=error, traceback="...")])
    controller.state = RunState.FAILED
    controller.message = f"worker:1 failed: {error}"
    table = dash.task_table

    def row_of(task: str) -> int:
        return next(r for r in range(table.rowCount()) if cell(table, r, 0).text() == task)

    qtbot.waitUntil(lambda: table.rowCount() == 2
                    and cell(table, row_of("worker:1"), TaskTable.STATUS).text() == "failed",
                    timeout=3000)
    row = row_of("worker:1")
    for col in range(table.columnCount()):
        item = cell(table, row, col)
        assert item.foreground().color() == QColor(FAILED_ROW_FG[False])
        assert error in item.toolTip()
    assert cell(table, row, TaskTable.ERROR).text() == error
    ok = cell(table, row_of("worker:0"), 0)
    assert ok.foreground().color() != QColor(FAILED_ROW_FG[False])
    assert dash.log_view.task == "worker:1"  # the failed task's log is shown
    qtbot.waitUntil(lambda: dash.header.message_label.isVisible(), timeout=3000)
    assert error in dash.header.message_label.text()
    assert STATE_COLOURS["failed"] in dash.header.state_label.styleSheet()


def test_log_view_appends_only_new_lines_and_survives_the_buffer_wrapping(
        qtbot: QtBot, dash: Dashboard, controller: FakeRun, metrics: LiveRun) -> None:
    dash.attach(controller)
    text = dash.log_view.text
    metrics.add_log_lines("worker:0", ["line 1", "line 2"])
    qtbot.waitUntil(lambda: text.toPlainText() == "line 1\nline 2", timeout=3000)
    metrics.add_log_lines("worker:0", ["line 3"])
    qtbot.waitUntil(lambda: text.toPlainText() == "line 1\nline 2\nline 3", timeout=3000)
    assert text.isReadOnly()
    assert text.document().maximumBlockCount() == LOG_LINES_KEPT

    # following the end: more lines keep the view at the bottom
    metrics.add_log_lines("worker:0", [f"more {i}" for i in range(200)])
    qtbot.waitUntil(lambda: text.toPlainText().endswith("more 199"), timeout=3000)
    bar = text.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == bar.maximum()
    # a line wider than the view: wrapped, read whole, nothing of it out of sight sideways
    metrics.add_log_lines("worker:0", ["wide " + "x" * 2000])
    qtbot.waitUntil(lambda: text.toPlainText().endswith("x" * 10), timeout=3000)
    wide = text.horizontalScrollBar()
    assert wide.maximum() == 0 and wide.value() == 0
    assert text.document().lastBlock().layout().lineCount() > 1
    dash.hide()  # lines that arrive while another page is shown
    metrics.add_log_lines("worker:0", ["wide again " + "y" * 2000])
    dash.refresh()
    dash._text_time = 0.0
    dash.refresh()
    dash.show()
    qtbot.waitUntil(lambda: text.toPlainText().endswith("y" * 10), timeout=3000)
    qtbot.wait(50)
    assert wide.value() == 0
    # scrolled up: new lines do not move the view
    bar.setValue(0)
    metrics.add_log_lines("worker:0", ["after scroll"])
    qtbot.waitUntil(lambda: text.toPlainText().endswith("after scroll"), timeout=3000)
    assert bar.value() == 0

    # more than the deque keeps arrive at once: only the kept lines, none twice, in order
    bar.setValue(bar.maximum())
    metrics.add_log_lines("worker:0", [f"flood {i}" for i in range(LOG_LINES_KEPT + 300)])
    qtbot.waitUntil(lambda: text.toPlainText().endswith(f"flood {LOG_LINES_KEPT + 299}"),
                    timeout=5000)
    lines = text.toPlainText().split("\n")
    assert len(lines) <= LOG_LINES_KEPT
    floods = [line for line in lines if line.startswith("flood")]
    assert floods == [f"flood {i}" for i in range(300, LOG_LINES_KEPT + 300)][-len(floods):]
    assert len(set(lines)) == len(lines)

    # another task: its own log from the start; TensorFlow's start-up messages folded into
    # one line (an error of TensorFlow's is the task's to see)
    metrics.add_log_lines("worker:1", [
        "2026-11-29 04:00:00.123456: I tensorflow/core/util/port.cc:153] oneDNN custom "
        "operations are on.",
        "I0000 00:00:1764388800.123456    4242 device_compiler.h:188] Compiled cluster using "
        "XLA!  This line is logged at most once for the lifetime of the process.",
        "W0000 00:00:1764388800.2  4242 op_level_cost_estimator.cc:699] Error in PredictCost() "
        "for the op: op: \"CropAndResize\"",
        "2026-11-29 04:00:01.5: I tensorflow/core/framework/local_rendezvous.cc:405] Local "
        "rendezvous is aborting with status: OUT_OF_RANGE: End of sequence",
        "E0000 00:00:1764388800.2  4242 cuda_dnn.cc:8310] Unable to register cuDNN factory",
        "w1 a", "w1 b"])
    qtbot.waitUntil(lambda: dash.log_view.combo.findText("worker:1") >= 0, timeout=3000)
    dash.log_view.select_task("worker:1")
    error = "E0000 00:00:1764388800.2  4242 cuda_dnn.cc:8310] Unable to register cuDNN factory"
    assert text.toPlainText().split("\n") == [error, "w1 a", "w1 b"]
    assert dash.log_view.count_label.text() == "3 lines · 4 of TensorFlow's folded"
    # more of them, a poll at a time: one count that grows, no line each time
    tf_data = ("/venv/lib/python3.11/site-packages/tensorflow/python/data/ops/dataset_ops.py:"
               "463: UserWarning: To make it possible to preserve tf.data options across "
               "serialization boundaries, their implementation has moved to be part of the "
               "TensorFlow graph.")
    source = '  warnings.warn("To make it possible to preserve tf.data options across "'
    for poll in (["I0000 00:00:1764388801.1   4242 port.cc:153] oneDNN custom operations"],
                 ["2026-11-29 04:00:02.5: I tensorflow/core/util/port.cc:153] oneDNN custom "
                  "operations are on."],
                 ["[worker:1] step 1/100", tf_data, source]):
        metrics.add_log_lines("worker:1", poll)
        dash._text_time = 0.0
        dash.refresh()
    qtbot.waitUntil(lambda: text.toPlainText().endswith("(the warning itself: \"all lines\")"),
                    timeout=3000)
    shown = text.toPlainText().split("\n")
    assert shown[-2:] == ["[worker:1] step 1/100", TF_DATA_IN_WORDS]
    assert not any("folded" in line for line in shown)
    assert dash.log_view.count_label.text() == "5 lines · 7 of TensorFlow's folded"
    # every line as written, a tick away
    dash.log_view.all_lines.setChecked(True)
    qtbot.waitUntil(lambda: text.toPlainText().endswith(source), timeout=3000)
    assert text.toPlainText().split("\n")[-3:] == ["[worker:1] step 1/100", tf_data, source]
    assert dash.log_view.count_label.text() == "12 lines"


def test_stop_button_requests_stop_once_and_the_end_is_shown_once(
        qtbot: QtBot, dash: Dashboard, controller: FakeRun, metrics: LiveRun) -> None:
    metrics.add_events(two_workers(1, 30))
    ended: list[tuple[str, str]] = []
    session = follow(dash, controller)
    session.ended.connect(lambda state, message: ended.append((state, message)))
    stop = dash.header.stop_button
    qtbot.waitUntil(stop.isEnabled, timeout=3000)
    qtbot.mouseClick(stop, LEFT)
    assert controller.stop_calls == 1
    assert not stop.isEnabled() and stop.text() == "Stopping…"
    qtbot.mouseClick(stop, LEFT)  # disabled: no second request
    assert controller.stop_calls == 1
    qtbot.waitUntil(lambda: "stopping" in dash.header.state_label.text().lower(), timeout=3000)
    dash.refresh()
    assert stop.text() == "Stopping…" and not stop.isEnabled() and ended == []

    with qtbot.waitSignal(session.ended, timeout=3000) as blocker:
        controller.end("stopped", "stopped by the user")
    assert blocker.args == ["stopped", "stopped by the user"]
    # a task that ended as the stop asked reads stopped, not as a crash's exit code
    metrics.set_task_state("worker:0", "stopped", exit_code=143)
    metrics.set_task_state("worker:1", "stopped", exit_code=137)
    dash.refresh()
    table = dash.task_table
    assert [cell(table, r, table.STATUS).text() for r in range(2)] == ["stopped"] * 2
    assert [cell(table, r, 5).text() for r in range(2)] == ["", "137 (SIGKILL)"]
    for _ in range(5):
        dash.refresh()
    qtbot.wait(300)
    assert ended == [("stopped", "stopped by the user")]
    assert not dash.timer.isActive()
    assert not stop.isEnabled() and stop.text() == "Stop"
    assert STATE_COLOURS["stopped"] in dash.header.state_label.styleSheet()
    # the plots keep their data after the end
    assert len(curve_xy(dash, 0)[0]) == 30


def test_a_run_that_ended_before_it_was_shown_is_drawn_whole_and_still(
        qtbot: QtBot, dash: Dashboard, controller: FakeRun, metrics: LiveRun) -> None:
    metrics.add_events(two_workers(1, 12))
    metrics.add_events([event("device", "worker:0", 1001.0, devices=[
        {"kind": "cpu", "index": 0, "util": 45.0, "mem_used": 700 << 20}]),
        event("split", "worker:0", 1002.0, step=12, steps=0, deferred_clock=14.5,
              training_seconds=0.2)])
    controller.end("finished", "all tasks finished")
    dash.attach(controller)
    qtbot.waitUntil(lambda: not dash.timer.isActive(), timeout=3000)
    assert len(curve_xy(dash, 3)[0]) == 12
    # the CPU headline after the run is its last sample while it trained, and says so
    readout = dash.device_panel.readout.text()
    assert readout.startswith("at the end:") and "45%" in readout  # the plot's unit
    assert "45%, 700 MiB" in dash.device_panel.readout.toolTip()  # both
    # too short to measure within 5 % of its first seconds: the card says so, why, and from
    # when on the clock
    text = dash.step_split.verdict_label.text()
    assert text.startswith("Not measured: the run was too short (measuring takes at most 5 %")
    assert "it needed about 14 s of training on the clock" in text
    assert STATE_COLOURS["finished"] in dash.header.state_label.styleSheet()
    assert not dash.header.stop_button.isEnabled()


def test_redraw_only_when_the_metrics_version_changed(
        qtbot: QtBot, dash: Dashboard, controller: FakeRun, metrics: LiveRun,
        monkeypatch: pytest.MonkeyPatch) -> None:
    metrics.add_events(two_workers(1, 5))
    dash.attach(controller)
    dash.timer.stop()  # drive the ticks by hand
    fed: list[int] = []
    original = dash.loss_panel.update_data

    def counted(data: Mapping[int, XY]) -> None:
        fed.append(1)
        original(data)

    monkeypatch.setattr(dash.loss_panel, "update_data", counted)
    count = dash.redraw_count
    for _ in range(10):
        dash.refresh()
    assert dash.redraw_count == count and fed == []
    metrics.add_events(two_workers(6, 6))
    dash.refresh()
    dash.refresh()
    assert dash.redraw_count == count + 1 and fed == [1]
    assert len(curve_xy(dash, 0)[0]) == 6


def test_long_series_are_drawn_as_an_envelope_until_the_user_zooms(
        qtbot: QtBot, dash: Dashboard, controller: FakeRun, metrics: LiveRun) -> None:
    n = ENVELOPE_MIN_POINTS * 3
    metrics.add_events(steps(1, n, "worker:0", (0,)))
    dash.attach(controller)
    panel = dash.loss_panel
    qtbot.waitUntil(lambda: 0 in panel.curves.curves, timeout=3000)
    x, y = curve_xy(dash, 0)
    assert len(x) < n // 4  # the min/max envelope, not every point
    assert 0 in panel.curves.layer.paths  # drawn by the plot's envelope layer
    # loss curves are kept in float32, as the training program computes them
    assert x.max() == n and y.max() == pytest.approx(loss(0, 1))
    assert y.min() == pytest.approx(loss(0, n), rel=1e-6)
    low, high = panel.plot.getViewBox().viewRange()[0]
    assert low <= 1 and high >= n  # following: the whole run is in view
    panel.plot.getViewBox().setXRange(100, 200)
    panel.plot.getViewBox().sigRangeChangedManually.emit([True, False])  # as a mouse zoom
    assert not panel.following
    x, y = curve_xy(dash, 0)  # zoomed in: the raw series as a line (pyqtgraph clips it)
    assert len(x) == n
    panel.plot.getViewBox().enableAutoRange()  # pyqtgraph's "A" button
    assert panel.following and len(curve_xy(dash, 0)[0]) < n // 4


def test_the_envelope_layer_leaves_a_gap_where_a_series_has_one(qtbot: QtBot) -> None:
    """A series with a NaN point (nothing measured then) is drawn as two lines."""
    import pyqtgraph as pg

    from dtgui.ui.plots.envelope_layer import EnvelopeLayer

    curve = pg.PlotDataItem(pen=pg.mkPen("#000"))
    layer = EnvelopeLayer({"a": curve})
    bx = np.arange(6, dtype=np.float64)
    top = np.array([1.0, 2.0, np.nan, 3.0, 4.0, 5.0])
    layer.set_series("a", bx, top, top - 0.5)
    lines, bounds = layer.paths["a"]
    assert [line.size() for line in lines] == [4, 6]  # two blocks, then three: 2 points each
    assert list(bounds) == [0.0, 5.0, 0.5, 5.0]
    layer.commit()
    assert layer.vertices == 10


def test_envelope_matches_a_full_recomputation_while_growing() -> None:
    rng = np.random.default_rng(3)
    y = rng.normal(size=50_000)
    x = np.arange(1, len(y) + 1, dtype=float)
    env = Envelope(max_blocks=256)
    for n in (1, 10, 1000, 1001, 5000, 12_345, 30_000, 50_000):
        bx, top, bottom = env.update(x[:n], y[:n])
        assert bx[-1] == x[n - 1] and top[-1] == bottom[-1] == y[n - 1]  # the last point
        assert top.max() == y[:n].max() and bottom.min() == y[:n].min()
        assert np.all(np.diff(bx) >= 0) and len(bx) <= 256 + 2
        assert n < 256 or len(bx) > 128  # between max_blocks / 2 and max_blocks blocks
        b, full = env.block, n // env.block
        np.testing.assert_array_equal(top[:full], y[:full * b].reshape(-1, b).max(axis=1))
        np.testing.assert_array_equal(bottom[:full], y[:full * b].reshape(-1, b).min(axis=1))
        fresh = Envelope(max_blocks=256)
        fresh.block = b
        for mine, other in zip((bx, top, bottom), fresh.update(x[:n], y[:n]), strict=True):
            np.testing.assert_array_equal(mine, other)


# -- tasks on several machines -----------------------------------------------------------------
PLACED = {"worker:0": "local", "worker:1": "h2", "worker:2": "h3", "worker:3": "lab box"}


def cpu_device(task: str, t: float, util: float) -> Event:
    return ev("device", task, t, devices=[{"kind": "cpu", "index": 0, "name": "Xeon",
                                           "util": util, "mem_used": 256 * 2**20,
                                           "mem_total": 2**33}])


@pytest.fixture
def placed() -> LiveRun:
    """A MultiWorkerMirrored run on this machine, h2, h3 and "lab box"; worker:2 (h3) runs at
    40 % of the others' pace and is flagged the way RunController flags it."""
    m = LiveRun(100)
    for task, machine in PLACED.items():  # as RunController does from the plan, before events
        m.set_task_machine(task, machine)
    events = [started(task, [i]) for i, task in enumerate(PLACED)]
    for s in range(1, 11):
        for i, task in enumerate(PLACED):
            events.append(ev("step", task, 1000.0 + s, step=s, epoch=1,
                             replica_losses=[loss(i, s)], replica_ids=[i], loss=1.0,
                             examples_per_sec=40.0 if task == "worker:2" else 100.0))
    events += [cpu_device(task, 1002.0 + i, 10.0 * (i + 1)) for i, task in enumerate(PLACED)]
    m.add_events(events)
    for task in PLACED:
        m.add_log_lines(task, [f"log of {task}"])
    found = find_stragglers(m.throughput_series())
    assert list(found) == ["worker:2"]
    m.set_stragglers({t: describe_straggler(t, f, PLACED[t]) for t, f in found.items()})
    return m


def row_of(table: TaskTable, task: str) -> int:
    return next(r for r in range(table.rowCount()) if cell(table, r, 0).text() == task)


def test_a_task_that_reports_no_steps_shows_a_dash_that_says_why(qtbot: QtBot) -> None:
    table = TaskTable()
    qtbot.addWidget(table)
    running = RunState.RUNNING
    table.update_tasks({"chief:0": TaskState("chief:0", running, step=250, replicas=1),
                        "worker:0": TaskState("worker:0", running),
                        "ps:0": TaskState("ps:0", RunState.STOPPED, exit_code=143),
                        "worker:1": TaskState("worker:1")})  # not started yet
    steps = {t: cell(table, row_of(table, t), TaskTable.STEP)
             for t in ("chief:0", "worker:0", "ps:0", "worker:1")}
    assert {t: c.text() for t, c in steps.items()} == {
        "chief:0": "250", "worker:0": "\u2014", "ps:0": "\u2014", "worker:1": "0"}
    assert "the coordinator (chief) sends it" in steps["worker:0"].toolTip()
    assert steps["chief:0"].toolTip() == steps["worker:1"].toolTip() == ""


def test_multi_machine_run_shows_each_tasks_machine_and_flags_the_straggler(
        qtbot: QtBot, dash: Dashboard, placed: LiveRun) -> None:
    dash.attach(FakeRun(placed))
    table = dash.task_table
    qtbot.waitUntil(lambda: table.rowCount() == 4 and table.item(3, 2) is not None, timeout=3000)
    assert not table.isColumnHidden(TaskTable.MACHINE)
    machine_header = table.horizontalHeaderItem(TaskTable.MACHINE)
    assert machine_header is not None and machine_header.text() == "Machine"
    machines = {cell(table, r, 0).text(): cell(table, r, TaskTable.MACHINE).text()
                for r in range(4)}
    assert machines == {"worker:0": "this machine", "worker:1": "h2", "worker:2": "h3",
                        "worker:3": "lab box"}

    slow = row_of(table, "worker:2")
    assert cell(table, slow, TaskTable.STATUS).text() == "running \u00b7 slow"
    assert not cell(table, slow, 0).icon().isNull()  # the badge
    for col in range(table.columnCount()):
        item = cell(table, slow, col)
        assert "worker:2 on h3 is a straggler: 40% of the other workers' throughput" \
            in item.toolTip()
        assert item.foreground().color() == QColor(SLOW_ROW_FG[False])
        assert item.background().color() == QColor(SLOW_ROW_BG[False])
    for task in ("worker:0", "worker:1", "worker:3"):
        row = row_of(table, task)
        assert cell(table, row, TaskTable.STATUS).text() == "running"
        assert cell(table, row, 0).icon().isNull()
        assert "straggler" not in cell(table, row, TaskTable.STATUS).toolTip()
        assert cell(table, row, TaskTable.STATUS).foreground().color() \
            == QColor(STATE_COLOURS["running"])

    # caught up again: the badge and the amber go away
    placed.set_stragglers({})
    qtbot.waitUntil(lambda: cell(table, slow, TaskTable.STATUS).text() == "running",
                    timeout=3000)
    assert cell(table, slow, 0).icon().isNull() and cell(table, slow, 1).toolTip() == ""
    assert cell(table, slow, 1).foreground().color() != QColor(SLOW_ROW_FG[False])


def test_multi_machine_device_series_and_logs_name_their_machine(
        qtbot: QtBot, dash: Dashboard, placed: LiveRun) -> None:
    dash.attach(FakeRun(placed))
    panel = dash.device_panel
    expected = ["local cpu0", "h2 cpu0", "h3 cpu0", "lab box cpu0"]
    assert list(placed.snapshot().device_util) == expected
    qtbot.waitUntil(lambda: list(panel.util.curves) == expected, timeout=3000)
    names = [panel.util.curves[k].opts["name"] for k in expected]
    assert len(set(names)) == 4 and "h2" in names[1] and "h3" in names[2]
    _x, util = panel.util.shown_data("h3 cpu0")
    assert list(util) == [30.0]  # h3's own CPU, not h2's
    qtbot.waitUntil(lambda: "h3" in panel.readout.text(), timeout=3000)
    readout = panel.readout.text()
    for short, value in (("here", 10), ("h2", 20), ("h3", 30), ("lab box", 40)):
        assert f"{short} <b>{value}%</b>" in readout
    assert "lab box cpu0: 40%, 256 MiB" in panel.readout.toolTip()
    # a card too narrow for four values (a third of a 1366-px row): their range, each on
    # hover; wide again, each value
    dash.resize(900, 800)
    qtbot.waitUntil(lambda: panel.readout.text() == "4 tasks <b>10%–40%</b>", timeout=10_000)
    assert not cut_labels(panel) and "lab box cpu0: 40%, 256 MiB" in panel.readout.toolTip()
    dash.resize(1900, 800)  # wide with room to spare: the card's third holds all four
    qtbot.waitUntil(lambda: "lab box <b>40%</b>" in panel.readout.text(), timeout=10_000)

    log = dash.log_view
    texts = ["worker:0 (this machine)", "worker:1 (h2)", "worker:2 (h3)", "worker:3 (lab box)"]
    qtbot.waitUntil(lambda: [log.combo.itemText(i) for i in range(log.combo.count())]
                    == texts, timeout=3000)
    log.select_task("worker:1")
    assert log.task == "worker:1" and log.text.toPlainText() == "log of worker:1"
    log.combo.setCurrentIndex(2)  # as the user picks "worker:2 (h3)"
    assert log.task == "worker:2" and log.text.toPlainText() == "log of worker:2"
    # a double click on a row of the task table shows that task's log
    table = dash.task_table
    table.cellDoubleClicked.emit(row_of(table, "worker:3"), TaskTable.MACHINE)
    assert log.task == "worker:3" and log.text.toPlainText() == "log of worker:3"


def test_a_run_on_this_machine_only_has_no_machine_column(
        qtbot: QtBot, dash: Dashboard, controller: FakeRun, metrics: LiveRun) -> None:
    metrics.add_events([*two_workers(1, 3), cpu_device("worker:1", 1003.0, 70.0)])
    metrics.add_log_lines("worker:1", ["w1"])
    dash.attach(controller)
    table = dash.task_table
    qtbot.waitUntil(lambda: table.rowCount() == 2 and table.item(1, 2) is not None,
                    timeout=3000)
    assert table.isColumnHidden(TaskTable.MACHINE)
    assert [cell(table, r, TaskTable.STATUS).text() for r in range(2)] == ["running"] * 2
    assert all(cell(table, r, 0).icon().isNull() for r in range(2))
    combo = dash.log_view.combo
    qtbot.waitUntil(lambda: combo.count() == 2, timeout=3000)
    assert [combo.itemText(i) for i in range(2)] == ["worker:0", "worker:1"]
    qtbot.waitUntil(lambda: "worker:1 cpu0" in dash.device_panel.util.curves, timeout=3000)
    assert list(dash.device_panel.util.curves) == ["worker:1 cpu0"]
    # a run placed on another machine, shown next in the same dashboard: the column appears
    other = LiveRun(10)
    other.set_task_machine("worker:0", "h2")
    other.add_events([started("worker:0", [0])])
    dash.attach(FakeRun(other))
    qtbot.waitUntil(lambda: table.rowCount() == 1 and not table.isColumnHidden(
        TaskTable.MACHINE), timeout=3000)
    assert cell(table, 0, TaskTable.MACHINE).text() == "h2"
    dash.attach(controller)  # and hides again for a local run
    qtbot.waitUntil(lambda: table.rowCount() == 2, timeout=3000)
    assert table.isColumnHidden(TaskTable.MACHINE)


def test_tasks_sharing_a_machine_give_one_device_series_for_it() -> None:
    """Two workers on h2 both see h2's CPU: one series, its memory the sum of theirs; when
    the reporting task ends, the other one speaks for the machine."""
    m = LiveRun(100)
    for task, machine in {"worker:0": "h2", "worker:1": "h2", "worker:2": "h3"}.items():
        m.set_task_machine(task, machine)
    m.add_events([cpu_device("worker:0", 1001.0, 50.0), cpu_device("worker:1", 1001.5, 52.0),
                  cpu_device("worker:2", 1001.7, 20.0), cpu_device("worker:0", 1002.0, 60.0)])
    snap = m.snapshot()
    assert list(snap.device_util) == ["h2 cpu0", "h3 cpu0"]
    assert list(snap.device_util["h2 cpu0"][1]) == [50.0, 60.0]  # worker:0's samples only
    assert list(snap.device_mem["h2 cpu0"][1]) == [256.0, 512.0]  # then both tasks' memory
    m.add_events([ev("failed", "worker:0", 1003.0, error="boom"),
                  cpu_device("worker:1", 1004.0, 70.0)])
    assert list(m.snapshot().device_util["h2 cpu0"][1]) == [50.0, 60.0, 70.0]


def test_a_restart_from_a_checkpoint_continues_the_curves_from_there() -> None:
    m = LiveRun(100)
    m.add_events([started("worker:0", [0, 1])])
    m.add_events([ev("step", "worker:0", 1000.0 + s, step=s, epoch=1, replica_ids=[0, 1],
                     replica_losses=[loss(0, s), loss(1, s)], examples_per_sec=100.0)
                  for s in range(1, 13)])
    # restarted after a failure; the newest checkpoint was at step 10
    m.add_events([ev("started", "worker:0", 1020.0, replicas=2, replica_ids=[0, 1], steps=100,
                     resumed_from_step=10)])
    snap = m.snapshot()
    assert list(snap.replica_loss[0][0]) == list(range(1, 11))
    assert list(snap.throughput["worker:0"][0]) == list(range(1, 11))
    assert snap.step == 10 and snap.tasks["worker:0"].step == 10
    m.add_events([ev("step", "worker:0", 1021.0, step=11, epoch=1, replica_ids=[0, 1],
                     replica_losses=[0.5, 0.5])])
    xs, ys = m.snapshot().replica_loss[1]
    assert list(xs) == list(range(1, 12)) and ys[-1] == 0.5


def test_elapsed_axis_never_repeats_a_label(qtbot: QtBot) -> None:
    axis = ElapsedAxis("bottom")
    for low, high in ((0.0, 1.3), (0.0, 7.0), (0.0, 4000.0)):
        labels = [label for spacing, values in axis.tickValues(low, high, 600)
                  for label in axis.tickStrings(values, 1.0, spacing)]
        assert labels and len(labels) == len(set(labels)), (low, high, labels)


def test_many_long_series_are_painted_off_the_ui_thread_and_follow_the_view(
        qtbot: QtBot, dash: Dashboard, controller: FakeRun, metrics: LiveRun) -> None:
    """128 replicas x 400 steps: too many vertices to stroke on the UI thread, so the layer's
    image is drawn by the render thread; it shows the series, and a new one comes when the
    data or the view's size changes."""
    ids = tuple(range(128))
    metrics.add_events(steps(1, 400, "worker:0", ids))
    dash.attach(controller)
    panel = dash.loss_panel
    layer = panel.curves.layer
    qtbot.waitUntil(lambda: len(layer.paths) == 128 and dash.fully_drawn, timeout=20_000)
    assert layer.threaded and layer.image is not None
    assert layer.image.generation == layer.generation

    def colour_shown(rid: int) -> bool:
        # replica 127 has the highest loss: the top band, drawn last (on top)
        image = panel.plot_widget.grab().toImage()
        wanted = series_colour(rid).rgb()
        return any(image.pixel(x, y) == wanted for x in range(0, image.width(), 3)
                   for y in range(image.height()))

    assert colour_shown(127)
    before = layer.image
    metrics.add_events(steps(401, 420, "worker:0", ids))
    qtbot.waitUntil(lambda: dash.fully_drawn and layer.image is not before, timeout=20_000)
    size = layer.image.image.deviceIndependentSize()
    dash.resize(1000, 700)
    qtbot.waitUntil(lambda: layer.image is not None
                    and layer.image.image.deviceIndependentSize() != size, timeout=20_000)
    assert colour_shown(127)


def test_many_replicas_are_drawn_by_one_layer_fed_within_a_frame_budget(
        qtbot: QtBot, dash: Dashboard, controller: FakeRun, metrics: LiveRun) -> None:
    """128 replicas (8 tasks x 16): every series goes through the envelope layer (one
    graphics item), no legend covers the plot, and a tick feeds series for a bounded time,
    the rest at the next ticks, until every curve has every step."""
    ids = tuple(range(128))
    metrics.add_events(steps(1, 60, "worker:0", ids))
    dash.attach(controller)
    panel = dash.loss_panel
    qtbot.waitUntil(lambda: len(panel.curves.layer.paths) == 128 and not panel.curves.backlog,
                    timeout=10_000)
    assert not panel.legend.isVisible() and panel.menu_button.isVisible()
    for rid in (0, 77, 127):
        x, y = curve_xy(dash, rid)
        assert x.max() == 60 and y.min() == pytest.approx(loss(rid, 60), rel=1e-6)
    metrics.add_events(steps(61, 62, "worker:0", ids))
    qtbot.waitUntil(lambda: curve_xy(dash, 127)[0].max() == 62, timeout=10_000)


def test_stop_asks_first_once_the_run_has_trained_a_minute(
        qtbot: QtBot, dash: Dashboard, controller: FakeRun, metrics: LiveRun,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from PySide6.QtWidgets import QApplication, QMessageBox

    from dtgui.ui.pages import dashboard

    metrics.add_events(two_workers(1, 30))
    follow(dash, controller)
    stop = dash.header.stop_button
    qtbot.waitUntil(stop.isEnabled, timeout=3000)
    monkeypatch.setattr(dashboard, "CONFIRM_STOP_SECONDS", -1.0)  # the minute has passed
    told: list[str] = []

    def answer(button: str) -> None:
        box = QApplication.activeModalWidget()
        assert isinstance(box, QMessageBox)
        told.append(f"{box.text()} {box.informativeText()}")
        (chosen,) = [b for b in box.buttons() if b.text() == button]
        chosen.click()

    QTimer.singleShot(0, lambda: answer("Keep training"))
    qtbot.mouseClick(stop, LEFT)
    assert controller.stop_calls == 0 and stop.isEnabled()
    # the step it saves at is not known when asked (it trains on while the question is
    # open, and stops at the end of a call of many steps): the step now, and "reaches"
    assert told[0].startswith("Stop the run (now at step 30)? Every task finishes the steps "
                              "it is running and saves a checkpoint at the step it reaches")
    click_stop(qtbot, stop)  # answers Stop
    assert controller.stop_calls == 1 and stop.text() == "Stopping…"


def test_profile_button_asks_n_off_the_ui_thread_and_links_to_tensorboard(
        qtbot: QtBot, dash: Dashboard, controller: FakeRun, metrics: LiveRun,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from PySide6.QtWidgets import QInputDialog

    from dtgui.core.measure.profile_input import ProfileInput
    from dtgui.ui.pages import dashboard

    read: list[Path] = []  # the folders whose profile was read (XProf's conversion stood in)

    def profile_inputs(output: Path) -> list[ProfileInput]:
        read.append(output)
        return [ProfileInput("worker:1", 31, 37, 0.12, 0.5),
                ProfileInput("worker:0", 31, 37, 0.964, 0.5)] if len(read) > 1 else []

    monkeypatch.setattr(dashboard, "profile_inputs", profile_inputs)
    metrics.add_events(two_workers(1, 30))
    session = follow(dash, controller)
    asked: list[int] = []

    def get_int(*args: Any) -> tuple[int, bool]:
        asked.append(args[3])  # the default offered
        # what it does, costs and where it goes; the range a count may take
        assert "(1 to 1000)" in args[2] and "about 0.2 s" in args[2]
        assert "output/tensorboard/TASK/plugins/profile" in args[2] and args[4:] == (1, 1000)
        return 7, True

    monkeypatch.setattr(QInputDialog, "getInt", get_int)
    button, label = dash.header.profile_button, dash.header.profile_label
    qtbot.waitUntil(button.isEnabled, timeout=3000)
    assert button.text() == "Profile N steps…"
    opened: list[list[Any]] = []
    dash.tensorboardRequested.connect(opened.append)
    qtbot.mouseClick(button, LEFT)
    qtbot.waitUntil(lambda: "Open in TensorBoard" in label.text(), timeout=5000)
    assert asked == [20] and controller.profile_asks == [7]
    assert label.text().startswith("profile written: <a href=")
    assert button.isEnabled()  # one capture at a time; this one is over
    # the card says what the new profile says of the input, beside dtgui's own split
    figure = dash.step_split.profile_label
    qtbot.waitUntil(figure.isVisible, timeout=5000)
    assert read == [controller.output_dir] * 2  # on showing the run (none yet), then now
    assert figure.text() == ("XProf: input 96 % of step time (steps 31-37, worker:0) · XProf: "
                             "input 12 % of step time (steps 31-37, worker:1)")
    label.linkActivated.emit("tensorboard")
    assert opened == [[controller.output_dir.parent]]
    # a refusal is shown as the run says it, and the run goes on
    monkeypatch.setattr(controller, "request_profile",
                        lambda *a, **k: "no profile: the reason")
    qtbot.mouseClick(button, LEFT)
    qtbot.waitUntil(lambda: label.text() == "no profile: the reason", timeout=5000)
    assert controller.state == RunState.RUNNING and controller.stop_calls == 0
    # a trace another asker had written (dtgui profile), as a task logs it: said and read
    metrics.add_events([ev("log", "worker:0", level="info", message="profile: steps 40-59 "
                           "captured in /r/output/tensorboard/worker-0/plugins/profile "
                           "(starting the profiler took 0.01 s)")])
    qtbot.waitUntil(lambda: len(read) == 3, timeout=5000)
    assert label.text().startswith("profile written: <a href=")
    with qtbot.waitSignal(session.ended, timeout=3000):
        controller.end("finished", "all tasks finished")
    assert not button.isVisible() and not button.isEnabled()


def test_a_run_without_a_step_yet_says_what_it_is_starting(qtbot: QtBot,
                                                           dash: Dashboard) -> None:
    metrics = LiveRun(100)
    for task in ("worker:0", "worker:1"):  # as the controller marks them once spawned
        metrics.set_task_state(task, "starting")
    dash.attach(FakeRun(metrics), run_name="r1", strategy="multi_worker_mirrored")
    step_text = dash.header.step_label.text
    qtbot.waitUntil(lambda: "starting: loading TensorFlow…" in step_text(), timeout=3000)
    # the step plots say what they wait for and what the run does, not axes of nothing
    loss, rate, device = dash.loss_panel, dash.throughput_panel, dash.device_panel
    for panel in (loss, rate):
        assert panel.waiting and not panel.plot_widget.isVisibleTo(dash)
        assert panel.waiting_label.text() == ("Waiting for the first step…\n"
                                              "The run is loading TensorFlow…")
    assert device.waiting and "first sample" in device.waiting_label.text()
    # TensorFlow's start-up only: counted, and the empty pane says so
    log = dash.log_view
    metrics.add_log_lines("worker:0", ["I0000 00:00:1764388801.1   4242 port.cc:153] oneDNN"])
    qtbot.waitUntil(lambda: log.count_label.text() == "1 of TensorFlow's folded", timeout=3000)
    assert log.text.placeholderText() == "Only TensorFlow's start-up messages so far."
    # a blank line printed: counted in words, and the empty pane does not say "no output"
    metrics.add_log_lines("worker:0", [""])
    qtbot.waitUntil(lambda: log.count_label.text() == "1 line · 1 of TensorFlow's folded",
                    timeout=3000)
    assert log.text.placeholderText() == "Only blank lines so far."
    metrics.add_events([started("worker:0", [0, 1]), started("worker:1", [2, 3])])
    qtbot.waitUntil(lambda: "building the model" in step_text(), timeout=3000)
    assert loss.waiting_label.text().endswith("The run is building the model and its first "
                                              "step…")
    metrics.add_events(two_workers(1, 3))
    qtbot.waitUntil(lambda: "step <b>3</b>" in step_text(), timeout=3000)
    assert "starting" not in step_text()
    # the first points: the plots, and the device plot still waits for its own
    assert not loss.waiting and loss.plot_widget.isVisibleTo(dash) and not rate.waiting
    assert device.waiting
    # a run that ends before its first step says so where its curves would be
    other = LiveRun(100)
    dash.attach(FakeRun(other), run_name="r2")
    assert loss.waiting and loss.waiting_label.text().startswith("Waiting for the first step")
    dash.show_end(RunState.FAILED, "boom")
    assert loss.waiting_label.text() == "No step was trained: the run failed before its first."


def test_the_epoch_text_never_reads_as_two_last_epochs() -> None:
    """Epochs count from 1 and an epoch's numbers come when it ends: the run's last steps
    may be part of an epoch that never ends (1,000 steps of 28: epoch 36 has 20)."""
    last = {"epoch": 35.0, "loss": 0.0276, "accuracy": 1.0}
    assert epoch_text(0, {}) == "epoch –"
    assert epoch_text(1, {}, step=3, per_epoch=28) == "epoch <b>1</b> (step 3 of 28)"
    # at the epoch's last step its numbers are the current epoch's
    assert epoch_text(35, last, step=980, per_epoch=28) == (
        "epoch <b>35</b> ended: training loss <b>0.0276</b>, accuracy <b>100.0%</b>")
    end = epoch_text(36, last, step=1000, per_epoch=28)
    assert end == ("epoch <b>36</b> (step 20 of 28) &nbsp;·&nbsp; epoch 35 ended: training "
                   "loss <b>0.0276</b>, accuracy <b>100.0%</b>")
    assert "last epoch" not in end
    # a script's epochs: no steps per epoch known
    assert epoch_text(4, {"epoch": 3.0, "loss": 0.5}) == (
        "epoch <b>4</b> &nbsp;·&nbsp; epoch 3 ended: training loss <b>0.5</b>")
