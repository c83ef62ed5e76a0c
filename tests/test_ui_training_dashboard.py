"""The dashboard's training-quality parts with real widgets and a real LiveRun fed with
schema-2 events: validation loss and metrics with their best points, the learning rate, EMA
smoothing, the saved model's bar; and the run notifications."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fakes import FakeRun, event, opened_file_urls, step_losses, steps_event
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtWidgets import QMainWindow
from pytestqt.qtbot import QtBot

from dtgui.core import smoothing
from dtgui.core.events import Event
from dtgui.core.live_run import LiveRun
from dtgui.core.plans.plan import LrSchedule, Optimizer, Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.smoothing import ema
from dtgui.ui.notify import Notifier, RunNotices
from dtgui.ui.pages.dashboard import Dashboard
from dtgui.ui.plots.plot_base import LIGHT
from dtgui.ui.plots.training_plots import RAW_ALPHA, LearningRatePanel
from dtgui.ui.run_session import RunSession
from dtgui.worker import step_batch

pytestmark = pytest.mark.gui
LEFT = Qt.MouseButton.LeftButton


def raw_loss(rid: int, last: int, replicas: int = 2) -> np.ndarray:
    return np.concatenate([step_losses(f, 10, replicas)[:, rid] for f in range(1, last + 1, 10)])


@pytest.fixture
def metrics() -> LiveRun:
    m = LiveRun(120)
    m.add_events([event("started", replicas=2, replica_ids=[0, 1], steps=120,
                        strategy=Strategy.MIRRORED)])
    return m


@pytest.fixture
def dash(qtbot: QtBot) -> Iterator[Dashboard]:
    d = Dashboard()
    qtbot.addWidget(d)
    d.resize(1400, 900)
    d.show()
    yield d
    d.detach()


def drawn(qtbot: QtBot, dash: Dashboard) -> None:
    """Every series fed (a busy machine can leave some to the next ticks' budget)."""
    qtbot.waitUntil(lambda: not dash.backlog, timeout=3000)


def validation(step: int, loss: float, acc: float, top5: float) -> Event:
    return event("validation", t=1000.0 + step, step=step, epoch=step // 40, loss=loss,
                 metrics={"accuracy": acc, "top_5": top5}, examples=360)


def test_validation_loss_metrics_best_points_and_learning_rate(
        qtbot: QtBot, dash: Dashboard, metrics: LiveRun) -> None:
    dash.attach(FakeRun(metrics), run_name="val")
    assert not dash.validation_panel.isVisible() and not dash.lr_panel.isVisible()
    events = []
    for first in range(1, 121, 10):
        events.append(steps_event(first, 10, lr=0.1 * (1 - (first + 9) / 120)))
        last = first + 9
        if last % 40 == 0:
            i = last // 40 - 1
            events.append(validation(last, [0.5, 0.3, 0.35][i], [0.8, 0.9, 0.88][i],
                                     [0.97, 0.98, 0.99][i]))
    metrics.add_events(events)
    qtbot.waitUntil(lambda: dash.validation_panel.isVisible() and dash.lr_panel.isVisible(),
                    timeout=3000)
    # the validation loss on the loss plot's step axis, dashed and thick, its best starred
    loss = dash.loss_panel
    x, y = loss.val_curves.shown_data("validation loss")
    np.testing.assert_array_equal(x, [40, 80, 120])
    np.testing.assert_allclose(y, [0.5, 0.3, 0.35])
    pen = loss.val_curves.curves["validation loss"].opts["pen"]
    assert pen.style() == Qt.PenStyle.DashLine and pen.widthF() >= 2
    assert loss.best_point is not None
    best_step, best_loss = loss.best_point
    assert best_step == 80.0 and best_loss == pytest.approx(0.3)
    qtbot.waitUntil(lambda: "step 80" in loss.best_label.text(), timeout=3000)
    assert "0.3" in loss.best_label.text() and "latest 0.35" in loss.best_label.text()
    assert "validation" in [label.text for _s, label in loss.legend.items]
    # the other metrics: one at a time, accuracy first; best = highest
    panel = dash.validation_panel
    assert panel.metrics() == ["accuracy", "top_5"] and panel.current_metric == "accuracy"
    x, y = panel.curves.shown_data("accuracy")
    np.testing.assert_allclose(y, [0.8, 0.9, 0.88])
    assert panel.marker.getOriginalDataset()[0].tolist() == [80.0]
    qtbot.waitUntil(lambda: "0.9" in panel.readout.text(), timeout=3000)
    assert "best 0.9 at step 80" in panel.readout.toolTip()
    panel.set_metric("top_5")
    assert panel.marker.getOriginalDataset()[0].tolist() == [120.0]
    assert list(panel.curves.curves) == ["top_5"]
    # the learning rate at the last step of every call
    x, y = dash.lr_panel.curves.shown_data("lr")
    np.testing.assert_array_equal(x, np.arange(10, 121, 10))
    np.testing.assert_allclose(y, [0.1 * (1 - s / 120) for s in range(10, 121, 10)])
    # its peak below the top of the short plot, where its label has room
    assert dash.lr_panel.plot.getViewBox().viewRange()[1][1] >= 1.25 * max(y)
    # a new run: until its first step its plots are empty, not on this run's 120 steps
    dash.attach(FakeRun(LiveRun(50)), run_name="next")
    for plot in (dash.loss_panel, dash.throughput_panel, dash.lr_panel):
        assert plot.plot.getViewBox().viewRange()[0][1] < 120
    assert dash.device_panel.plot.getViewBox().viewRange()[1] == [-6, 106]  # 0-100 % kept


def test_smoothing_is_tensorboards_ema_with_the_raw_points_faint_behind(
        qtbot: QtBot, dash: Dashboard, metrics: LiveRun) -> None:
    dash.attach(FakeRun(metrics), run_name="ema")
    metrics.add_events([steps_event(f, 10) for f in range(1, 61, 10)])
    panel = dash.loss_panel
    assert panel.slider.value() == 600 and panel.weight == pytest.approx(0.6)
    qtbot.waitUntil(lambda: 1 in panel.curves.curves
                    and len(panel.curves.shown_data(1)[0]) == 60, timeout=3000)
    drawn(qtbot, dash)
    np.testing.assert_allclose(panel.curves.shown_data(1)[1], ema(raw_loss(1, 60), 0.6),
                               rtol=1e-6)
    _raw_x, raw_y = panel.raw_curves.shown_data(1)
    np.testing.assert_allclose(raw_y, raw_loss(1, 60), rtol=1e-6)
    assert panel.raw_curves.curves[1].opts["pen"].color().alpha() == RAW_ALPHA
    # grows incrementally: the same as smoothing the whole series
    metrics.add_events([steps_event(f, 10) for f in range(61, 121, 10)])
    qtbot.waitUntil(lambda: len(panel.curves.shown_data(0)[0]) == 120, timeout=3000)
    drawn(qtbot, dash)
    np.testing.assert_allclose(panel.curves.shown_data(0)[1], ema(raw_loss(0, 120), 0.6),
                               rtol=1e-6)
    # the slider
    panel.slider.setValue(950)
    drawn(qtbot, dash)
    assert panel.weight == pytest.approx(0.95) and panel.weight_label.text() == "0.950"
    np.testing.assert_allclose(panel.curves.shown_data(0)[1], ema(raw_loss(0, 120), 0.95),
                               rtol=1e-6)
    # hiding a replica hides its raw points too
    panel.set_replica_visible(0, False)
    assert not panel.raw_curves.curves[0].isVisible()
    panel.set_replica_visible(0, True)
    panel.raw_check.setChecked(False)
    drawn(qtbot, dash)
    assert not panel.raw_curves.curves
    panel.raw_check.setChecked(True)
    drawn(qtbot, dash)
    assert set(panel.raw_curves.curves) == {0, 1}
    # 0: the points themselves, and no faint copies
    panel.set_smoothing(0)
    drawn(qtbot, dash)
    assert panel.slider.value() == 0 and not panel.raw_curves.curves
    np.testing.assert_allclose(panel.curves.shown_data(0)[1], raw_loss(0, 120), rtol=1e-6)


def test_smoothing_after_a_restart_follows_the_retrained_steps(
        qtbot: QtBot, dash: Dashboard, metrics: LiveRun) -> None:
    dash.attach(FakeRun(metrics), run_name="restart")
    metrics.add_events([steps_event(f, 10) for f in range(1, 61, 10)])
    panel = dash.loss_panel
    qtbot.waitUntil(lambda: 0 in panel.curves.curves
                    and len(panel.curves.shown_data(0)[0]) == 60, timeout=3000)
    # resumed from step 40's checkpoint: steps 41.. are trained again, with other losses
    metrics.add_events([event("started", t=2000.0, replicas=2, replica_ids=[0, 1], steps=120,
                              resumed_from_step=40)])
    again = [steps_event(f, 10) for f in range(41, 81, 10)]
    for resumed in again:
        rows = step_batch.decode(resumed.data["losses"], 10, 2) + 0.5
        resumed.data["losses"] = step_batch.encode(rows)
    metrics.add_events(again)
    qtbot.waitUntil(lambda: len(panel.curves.shown_data(0)[0]) == 80, timeout=3000)
    drawn(qtbot, dash)
    x, raw = metrics.snapshot().replica_loss[0]
    assert x.tolist() == list(range(1, 81)) and raw[45] > raw[35] + 0.3
    np.testing.assert_allclose(panel.curves.shown_data(0)[1], ema(raw, 0.6), rtol=1e-6)


def test_smoothing_many_replicas_keeps_the_frame_short(
        qtbot: QtBot, dash: Dashboard, monkeypatch: pytest.MonkeyPatch) -> None:
    replicas, per_call = 64, 500
    metrics = LiveRun(20_000)
    metrics.add_events([event("started", replicas=replicas, replica_ids=list(range(replicas)),
                              steps=20_000, strategy=Strategy.MIRRORED)])
    metrics.add_events([steps_event(f, per_call, replicas) for f in range(1, 20_001, per_call)])
    dash.attach(FakeRun(metrics), run_name="many")
    qtbot.waitUntil(lambda: not dash.backlog, timeout=10000)
    assert not dash.loss_panel.raw_curves.curves  # past RAW_MAX_SERIES: no faint copies
    assert not dash.loss_panel.raw_check.isEnabled()
    smoothed: list[int] = []  # points smoothed, a frame
    smooth_into = smoothing._smooth_into

    def counting(out: np.ndarray, y: np.ndarray, weight: float, state: float,
                 finite: int) -> tuple[float, int]:
        smoothed[-1] += len(y)
        return smooth_into(out, y, weight, state, finite)

    monkeypatch.setattr(smoothing, "_smooth_into", counting)
    for first in range(20_001, 20_001 + 10 * 50, 50):
        metrics.add_events([steps_event(first, 50, replicas)])
        smoothed.append(0)
        dash.refresh()
    # the frames smooth only the new points, each once: 50 a call for each replica and the
    # mean (a frame may leave some for the next), never a replica's whole 20,000 again (a full
    # pass over 64 x 20k took ~60 ms a frame)
    assert 0 < sum(smoothed) <= (replicas + 1) * 50 * len(smoothed), smoothed


def test_new_smoothing_on_an_ended_long_run_redraws_every_envelope(
        qtbot: QtBot, dash: Dashboard) -> None:
    replicas, steps = 20, 6000  # envelopes: more series than MANY_SERIES, longer than 4096
    metrics = LiveRun(steps)
    metrics.add_events([event("started", replicas=replicas, replica_ids=list(range(replicas)),
                              steps=steps, strategy=Strategy.MIRRORED)])
    metrics.add_events([steps_event(f, 500, replicas) for f in range(1, steps + 1, 500)])
    controller = FakeRun(metrics)
    controller.end("finished")
    dash.attach(controller, run_name="ended")
    qtbot.waitUntil(lambda: not dash.backlog and not dash.timer.isActive(), timeout=10000)
    panel = dash.loss_panel
    _steps, raw = metrics.snapshot().replica_loss[7]
    assert 7 in panel.curves.layer.paths
    _x, shown = panel.curves.shown_data(7)
    assert shown.max() == pytest.approx(ema(raw, 0.6).max(), rel=1e-6)
    panel.slider.setValue(950)  # the run has ended: the change itself must bring frames
    qtbot.waitUntil(lambda: not dash.backlog, timeout=10000)
    for rid in (0, 7, 19):
        _steps, raw = metrics.snapshot().replica_loss[rid]
        _x, shown = panel.curves.shown_data(rid)
        smoothed = ema(raw, 0.95)
        assert shown.max() == pytest.approx(smoothed.max(), rel=1e-6)
        assert shown.min() == pytest.approx(smoothed.min(), rel=1e-6)
    lo, hi = panel.curves.y_extent() or (0.0, 0.0)
    every = [ema(metrics.snapshot().replica_loss[r][1], 0.95) for r in range(replicas)]
    assert lo == pytest.approx(min(e.min() for e in every))
    assert hi == pytest.approx(max(e.max() for e in every))


def test_a_short_plot_keeps_a_label_on_its_y_axis(qtbot: QtBot) -> None:
    """A constant learning rate in a plot as short as the dashboard's at 1366x768: its 0 and
    0.001 ticks are at the ends, where pyqtgraph draws no label; a middle one is labelled."""
    panel = LearningRatePanel(LIGHT)
    qtbot.addWidget(panel)
    panel.resize(400, 110)
    panel.show()
    x = np.arange(10, 1001, 10, dtype=float)
    panel.update_data((x, np.full_like(x, 0.001)))
    axis = panel.plot.getAxis("left")
    qtbot.waitUntil(lambda: axis.geometry().height() > 20, timeout=5000)  # laid out
    panel.settle()
    image = QImage(8, 8, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    axis.generateDrawSpecs(painter)  # as a paint does: the axis widens to its labels
    qtbot.wait(50)
    specs = axis.generateDrawSpecs(painter)
    painter.end()
    view = panel.plot.getViewBox().viewRange()[1]
    assert [text for _rect, _flags, text in specs[2]] == ["0.0005"], (axis.geometry(), view)


def test_saved_model_bar_opens_the_models_folder(qtbot: QtBot, dash: Dashboard, metrics: LiveRun,
                                                 tmp_path: Path) -> None:
    run = FakeRun(metrics, path=tmp_path / "bundle")
    output = run.output_dir
    dash.attach(run, run_name="saved")
    assert not dash.model_bar.isVisible()
    assert not dash.loss_panel.legend.isVisible()  # no curve yet: no empty legend box
    metrics.add_events([
        event("model_saved", role="best", path="model/best/model.keras",
              savedmodel="model/best/saved_model", step=80, metric="val_loss", value=0.3),
        event("model_saved", role="final", path="model/model.keras",
              savedmodel="model/saved_model", step=120)])
    qtbot.waitUntil(dash.model_bar.isVisible, timeout=3000)
    text = dash.model_bar.label.text()
    assert "output/model/model.keras" in text and "step 120" in text
    assert "best val_loss 0.3 at step 80" in text
    with opened_file_urls() as opened:
        qtbot.mouseClick(dash.model_bar.open_button, LEFT)
    assert [u.toLocalFile() for u in opened] == [str(output / "model")]
    dash.model_bar.opener = lambda _url: False  # no file manager on this desktop
    qtbot.mouseClick(dash.model_bar.open_button, LEFT)
    assert str(output / "model") in dash.model_bar.label.text()
    assert QGuiApplication.clipboard().text() == str(output / "model")


def test_notifications_when_a_run_restarts_finishes_or_fails(
        qtbot: QtBot, metrics: LiveRun) -> None:
    window = QMainWindow()
    qtbot.addWidget(window)
    window.resize(900, 600)
    window.show()
    notifier = Notifier(window)
    assert not notifier.uses_tray  # offscreen: no tray, the toast and status bar say it
    session = RunSession(parent=window)
    RunNotices(notifier, session)
    run = FakeRun(metrics, Plan(run_name="digits-1"), max_restarts=3)
    session.show(run)
    with qtbot.waitSignal(notifier.shown, timeout=3000) as got:
        run.restart()
    assert got.args[0] == "digits-1 restarted"
    assert "restart 1 of 3" in got.args[1]
    assert notifier.toast.isVisible() and "digits-1 restarted" in notifier.toast.text()
    assert "digits-1 restarted" in window.statusBar().currentMessage()
    # over the status bar, which says the same: it covers nothing of the page above it
    assert notifier.toast.geometry().top() >= window.statusBar().geometry().top()
    with qtbot.waitSignal(notifier.shown, timeout=3000) as got:
        run.end("finished", final_loss=0.1234)
    assert got.args == ["digits-1 finished", "final loss 0.1234"]
    failing = FakeRun(metrics, Plan(run_name="digits-2"))
    session.show(failing)
    with qtbot.waitSignal(notifier.shown, timeout=3000) as got:
        failing.end("failed", "worker:1 failed: ResourceExhaustedError: OOM")
    assert got.args == ["digits-2 failed", "worker:1 failed: ResourceExhaustedError: OOM"]
    stopped = FakeRun(metrics, Plan(run_name="digits-3"))
    session.show(stopped)
    with qtbot.waitSignal(session.ended, timeout=3000):
        stopped.end("stopped")  # the user stopped it: nothing to tell them
    # a run opened from the history has ended already: nothing to say
    ended = FakeRun(metrics, Plan(run_name="old"))
    ended.end("finished", final_loss=0.5)
    session.show(ended)
    qtbot.wait(3 * 100)
    assert [title for title, _ in notifier.history] == [
        "digits-1 restarted", "digits-1 finished", "digits-2 failed"]


@pytest.mark.slow
def test_a_real_run_shows_validation_learning_rate_and_its_saved_model(
        qtbot: QtBot, dash: Dashboard, tmp_path: Path) -> None:
    """The real controller and training program: a tiny demo run with a schedule, validation
    every 20 steps and the best model kept, followed live to its end."""
    from dtgui.core.settings import runs_dir
    from dtgui.launch.start.pipeline import launch_plan

    plan = Plan(run_name="live-val", strategy=Strategy.MIRRORED, replicas_per_task=2, steps=60,
                steps_per_epoch=30, optimizer=Optimizer.ADAMW, lr_schedule=LrSchedule.WARMUP_COSINE,
                warmup_steps=10, validate_every=20, save_best=True, checkpoint_every=0)
    controller = launch_plan(plan, runs_dir())
    window = QMainWindow()
    qtbot.addWidget(window)
    session = RunSession(parent=window)
    notices = RunNotices(Notifier(window), session)
    dash.listen(session)
    session.started.connect(dash.attach)
    try:
        with qtbot.waitSignal(session.ended, timeout=240_000) as ended:
            session.show(controller)
    finally:
        controller.request_stop()
        controller.wait(30)
    assert ended.args[0] == "finished", controller.message
    qtbot.waitUntil(lambda: not dash.backlog, timeout=5000)
    x, y = dash.loss_panel.val_curves.shown_data("validation loss")
    assert x.tolist() == [20, 40, 60] and np.all(np.isfinite(y))
    assert dash.loss_panel.best_point is not None
    assert dash.validation_panel.isVisible() and "accuracy" in dash.validation_panel.metrics()
    lr_x, lr_y = dash.lr_panel.curves.shown_data("lr")
    assert len(lr_x) >= 2 and lr_y[-1] < lr_y.max()  # the cosine decays after the warm-up
    assert dash.model_bar.isVisible() and dash.model_bar.folder is not None
    assert (dash.model_bar.folder / "model.keras").is_file()
    qtbot.waitUntil(lambda: bool(notices.notifier.history), timeout=3000)
    assert notices.notifier.history[-1][0] == "live-val finished"
