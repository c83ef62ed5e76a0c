"""The dashboard's split of each task's step (a bar per task) and the run's verdict, fed from
split events through the run's metrics; the run history's view reads the same."""

from __future__ import annotations

from fakes import FakeRun, event, started_event
from pytestqt.qtbot import QtBot
from widgets import cell, cell_text

from dtgui.core.events import Event
from dtgui.core.live_run import LiveRun
from dtgui.core.measure.bottleneck import INPUT, RunFacts, StepSplit
from dtgui.core.measure.profile_input import ProfileInput
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.run_state import RunState
from dtgui.ui.pages.dashboard import BANNERS_MIN_HEIGHT, LOSS_ROW_MIN_HEIGHT, Dashboard
from dtgui.ui.plots.step_split import MAX_ROWS, MEASURING_HINT, StepSplitPanel, part_line
from dtgui.worker.events import SCHEMA_VERSION


def split_event(task: str, **parts: float | str) -> Event:
    """A `split` event of `task`: its parts (seconds a step) and `of_task` when it reports
    another task's."""
    return event("split", task, 1000.0, SCHEMA_VERSION, step=100, calibration_seconds=0.05,
                 training_seconds=20.0, **parts)


def test_the_dashboard_shows_each_tasks_split_and_the_verdict(qtbot: QtBot) -> None:
    metrics = LiveRun(100)
    metrics.add_events([started_event([0], task="worker:0"),
                        started_event([1], task="worker:1")])
    dash = Dashboard()
    qtbot.addWidget(dash)
    dash.attach(FakeRun(metrics))
    dash.refresh()
    # nothing measured yet: the card says it is coming, with no bar
    assert dash.step_split.isVisibleTo(dash) and not dash.step_split._rows
    assert dash.step_split.verdict_label.text() == MEASURING_HINT
    # too short so far to measure within the budget: the card says from when it will be
    metrics.add_events([event("split", "worker:0", 999.0, SCHEMA_VERSION, step=8, steps=0,
                              deferred_clock=12.6, training_seconds=0.5)])
    dash._text_time = 0.0
    dash.refresh()
    assert dash.step_split.isVisibleTo(dash)
    # on the clock the user sees (the first call's tracing included), not training seconds
    assert "Not measured yet: measured once a task has trained about 13 s on the clock" in \
        dash.step_split.verdict_label.text()
    metrics.add_events([split_event("worker:0", input=0.002, compute=0.030, communication=0.004,
                                    reporting=0.0001),
                        split_event("worker:1", input=0.062, compute=0.034, communication=0.004,
                                    reporting=0.0001)])
    dash._text_time = 0.0
    dash.refresh()
    panel = dash.step_split
    assert panel.isVisibleTo(dash)
    assert panel.verdict.limit == INPUT and panel.verdict.task == "worker:1"
    text = panel.verdict_label.text()
    assert "input wait 62 % of each step on worker:1" in text
    # the demo's input pipeline is dtgui's: what its user can do, not .prefetch(...)
    assert "dtgui's own input pipeline" in panel.verdict.advice and "prefetch" not in text
    names = [panel._rows[i][0].text() for i in range(2)]
    assert names == ["worker:0", "worker:1"]
    bar = panel._rows[1][1]
    assert bar.split is not None and "input wait: 62 ms (61.9 %)" in bar.toolTip()
    assert panel._rows[1][2].text() == "100 ms / step"
    assert panel.cost_label.text() == "measuring took 0.05 s of 20 s training (0.25 %)"
    # what it counts, and why its training time is shorter than the header's elapsed time
    tip = panel.cost_label.toolTip()
    assert "calibration runs" in tip and "since the task's training began" in tip
    assert "elapsed time is longer" in tip and "start-up" in tip
    # the next splits, a little under the input threshold (a new verdict would be compute),
    # are noise: the verdict shown stays
    metrics.add_events([split_event("worker:1", input=0.0155, compute=0.038, communication=0.004,
                                    reporting=0.0001)] * 6)
    dash._text_time = 0.0
    dash.refresh()
    assert panel.verdict.limit == INPUT and 0.25 < panel.verdict.share < 0.30
    bar.grab()  # paints
    dash.attach(FakeRun(LiveRun(100)))  # another run: no bar until it measures
    assert panel.verdict_label.text() == MEASURING_HINT
    assert not any(row[0].isVisibleTo(panel) for row in panel._rows)
    dash.show_end(RunState.FINISHED, "")  # it ended without a split: no card
    assert not panel.isVisibleTo(dash)
    # ParameterServer with deterministic ops: the workers cannot time their steps, and the
    # card says so (and what to change) rather than staying away
    dash.attach(FakeRun(LiveRun(100), plan=Plan(run_name="ps", strategy=Strategy.PARAMETER_SERVER,
                                                workers=2, parameter_servers=1)))
    assert panel.isVisibleTo(dash) and "Deterministic ops off" in panel.verdict_label.text()
    # without them the coordinator reports each worker's split (of_task), shown per worker
    metrics = LiveRun(100)
    dash.attach(FakeRun(metrics, plan=Plan(run_name="ps", strategy=Strategy.PARAMETER_SERVER,
                                           workers=2, parameter_servers=1,
                                           deterministic=False)))
    assert panel.verdict_label.text() == MEASURING_HINT
    metrics.add_events([split_event("chief:0", of_task=f"worker:{i}", input=0.001,
                                    compute=0.004, communication=0.008 + i / 1000)
                        for i in range(2)])
    dash._text_time = 0.0
    dash.refresh()
    assert panel.isVisibleTo(dash)
    assert [panel._rows[i][0].text() for i in range(2)] == ["worker:0", "worker:1"]
    text = panel.verdict_label.text()
    assert "communication 64 % of each step on worker:1" in text  # 9 of 14 ms
    assert "add parameter servers (now 1)" in text and "all-reduce" not in text


def test_many_tasks_show_the_first_bars_and_the_verdict_covers_them_all(qtbot: QtBot) -> None:
    panel = StepSplitPanel()
    qtbot.addWidget(panel)
    splits = {f"worker:{i}": StepSplit(f"worker:{i}", compute=0.01,
                                       communication=0.03 if i == 11 else 0.001)
              for i in range(12)}
    panel.update_splits(splits)
    assert sum(row[0].isVisibleTo(panel) for row in panel._rows) == MAX_ROWS
    assert "+ 4 more task(s)" in panel.more_label.text()
    assert panel.verdict.limit == "communication" and panel.verdict.task == "worker:11"
    panel.show()
    panel.update_splits({})
    assert not panel.isVisible()


def test_a_script_run_says_how_to_get_its_split_until_it_reports_one(qtbot: QtBot) -> None:
    panel = StepSplitPanel()
    qtbot.addWidget(panel)
    panel.set_script(True)
    panel.clear()
    panel.update_splits({})
    assert not panel.isHidden() and "report(step, loss)" in panel.verdict_label.text()
    assert "timed(dataset)" in panel.verdict_label.text()
    panel.update_splits({"worker:0": StepSplit("worker:0", compute=0.01, reporting=0.0001,
                                               measured=("compute", "reporting"),
                                               method="report")})
    assert "compute" in panel.verdict_label.text() and "report(" not in panel.verdict_label.text()


def test_a_bar_whose_compute_was_not_told_apart_says_so_on_hover(qtbot: QtBot) -> None:
    from dtgui.ui.plots.step_split import SplitBar

    bar = SplitBar()
    qtbot.addWidget(bar)
    bar.set_split(StepSplit("worker:1", input=0.0012, communication=0.0042,
                            measured=("input", "communication"), method="worker-timed"))
    assert bar.toolTip().startswith("input wait: ")
    assert bar.toolTip().endswith("so the communication shown holds compute too")
    bar.set_split(StepSplit("worker:0", input=0.0017, compute=0.0017, communication=0.004,
                            measured=("input", "compute", "communication")))
    assert "not measured apart" not in bar.toolTip() and "compute: " in bar.toolTip()


def test_compare_shows_where_each_runs_time_went_with_the_advice_on_hover(
        qtbot: QtBot) -> None:
    from dtgui.core.measure.bottleneck import verdict
    from dtgui.core.runs.compare import RunSummary
    from dtgui.ui.compare.view import LIMIT_FIELD, CompareView

    view = CompareView()
    qtbot.addWidget(view)
    slow = RunSummary("slow", "/nowhere", limit=verdict(
        [StepSplit("worker:1", input=0.062, compute=0.038)]))
    view.show_summaries([slow, RunSummary("old", "/elsewhere")])
    row = view.row_of(LIMIT_FIELD)
    limit = cell(view.table, row, 0)
    assert limit.text() == "input 62 % (worker:1)"
    assert "prefetch(tf.data.AUTOTUNE)" in limit.toolTip()
    assert cell_text(view.table, row, 1) == "\u2014"  # a run from before the split


def test_a_device_near_its_memory_limit_leads_the_card_even_before_a_split(qtbot: QtBot) -> None:
    from dtgui.core.measure.memory import DeviceMemory

    panel = StepSplitPanel()
    qtbot.addWidget(panel)
    panel.set_script(True)  # a script that gives no split: the memory verdict still shows
    full = DeviceMemory("worker:1", "gpu0", "NVIDIA H100 80GB HBM3", "gpu", peak=80 << 30,
                        used=79 << 30, total=85520809984, fullest=int(0.95 * 85520809984))
    roomy = DeviceMemory("worker:0", "gpu0", "NVIDIA H100 80GB HBM3", "gpu", peak=8 << 30,
                         used=8 << 30, total=85520809984, fullest=8 << 30)
    panel.update_splits({}, [roomy])
    assert panel.verdict.limit == ""  # nothing near its limit, nothing split: no verdict
    panel.update_splits({}, [roomy, full])
    assert not panel.isHidden() and panel.verdict.limit == "memory"
    text = panel.verdict_label.text()
    assert "memory 95 % full on worker:1 gpu0" in text and "#b3261e" in text
    assert "dtgui_worker.report" in text  # the script's hint stays under it
    panel.update_splits({"worker:1": StepSplit("worker:1", input=0.005, compute=0.03)},
                        [roomy, full])
    text = panel.verdict_label.text()
    assert "memory 95 % full" in text and "Step time:" in text and "compute 86 %" in text


def test_a_run_too_short_to_measure_says_so_after_its_end_and_when_reopened(
        qtbot: QtBot) -> None:
    # the demo's events: a deferred split at its first call and at its end, 10 s on the clock
    # of the 20 s the budget needed
    metrics = LiveRun(1000)
    metrics.add_events([started_event([0, 1], task="worker:0"),
                        event("split", "worker:0", 999.0, SCHEMA_VERSION, step=7, steps=0,
                              deferred_clock=20.0, clock_seconds=3.4),
                        event("split", "worker:0", 1006.0, SCHEMA_VERSION, step=1000, steps=0,
                              deferred_clock=20.0, clock_seconds=10.4)])
    too_short = ("Not measured: the run was too short: it trained 10 s on the clock and "
                 "needed about 10 s more")
    dash = Dashboard()
    qtbot.addWidget(dash)
    run = FakeRun(metrics)
    dash.attach(run)
    dash.refresh()
    panel = dash.step_split
    assert panel.isVisibleTo(dash) and "Not measured yet" in panel.verdict_label.text()
    run.finished, run.state = True, RunState.FINISHED
    dash.show_end(RunState.FINISHED, "")
    # the run's profile is read off the UI thread after the end: its answer (no profile)
    # keeps the card and its line
    panel.set_profile_inputs([])
    assert panel.isVisibleTo(dash) and too_short in panel.verdict_label.text()
    # reopened from the Runs page: an ended run from the start
    dash.attach(FakeRun(metrics))
    dash.detach()
    reopened = FakeRun(metrics)
    reopened.finished, reopened.state = True, RunState.FINISHED
    dash.attach(reopened)
    panel.set_profile_inputs([])
    assert panel.isVisibleTo(dash) and too_short in panel.verdict_label.text()


def test_a_communication_of_nothing_says_why_on_the_bar() -> None:
    """Mirrored over 2 replicas on one machine: the all-reduce timed alone came out as 0 (the
    demo's split events say so); a single replica has none; a measured one gives its time."""
    nothing = StepSplit("worker:0", input=0.0002, compute=0.0014, communication=0.0,
                        reporting=0.00004)
    line = part_line(nothing, "communication", RunFacts(replicas=2, hosts=1))
    assert line.startswith("communication: 0 ms, too quick to measure")
    assert "all-reduce between the 2 replicas" in line and "one machine" in line
    assert "one machine" not in part_line(nothing, "communication", RunFacts(replicas=4, hosts=2))
    assert part_line(nothing, "communication", RunFacts(replicas=1)) == \
        "communication: none (a single replica has nothing to all-reduce)"
    measured = StepSplit("worker:0", compute=0.009, communication=0.001)
    assert part_line(measured, "communication", RunFacts(replicas=2)) == \
        "communication: 1 ms (10.0 %)"
    # a script's own report says only what it measured
    reported = StepSplit("worker:0", compute=0.01, method="report")
    assert part_line(reported, "communication") == "communication: 0 ms (0.0 %)"


def test_the_bars_above_the_plots_scroll_rather_than_squeeze_the_loss_plot(
        qtbot: QtBot) -> None:
    """Every bar shown at once (the saved model, a card with four tasks' bars, the CPU's
    line and a profile's): on a 1366x768 screen's dashboard they scroll within what the loss
    row leaves; on a larger one they are shown whole."""
    metrics = LiveRun(2000)
    workers = [f"worker:{i}" for i in range(4)]
    metrics.add_events([started_event([2 * i, 2 * i + 1], task=t) for i, t in enumerate(workers)])
    metrics.add_events([split_event(t, input=0.06, compute=0.03, communication=0.01)
                        for t in workers])
    metrics.add_events([event("model_saved", "worker:0", 1001.0, SCHEMA_VERSION, step=1000,
                              role="final", path="model/model.keras")])
    metrics.add_events([event("device", t, 1001.0 + i, SCHEMA_VERSION, devices=[
        {"kind": "cpu", "index": 0, "util": 99.0, "task_util": 8.0, "mem_used": 1}])
        for t in workers for i in range(8)])
    dash = Dashboard()
    qtbot.addWidget(dash)
    dash.resize(1366, 640)  # what the window leaves the dashboard on a 1366x768 screen
    dash.show()
    dash.attach(FakeRun(metrics))
    dash.header.set_profile("profiling steps 101–120…")
    dash._text_time = 0.0
    dash.refresh()
    panel = dash.step_split
    panel.set_profile_inputs([ProfileInput(t, 101, 120, 0.6, 1.0) for t in workers])
    assert panel.verdict.crowded is not None and dash.model_bar.isVisibleTo(dash)
    top = dash.loss_panel.parentWidget()
    assert top is not None
    qtbot.waitUntil(lambda: dash.banners.verticalScrollBar().maximum() > 0, timeout=10_000)
    assert dash.minimumSizeHint().height() <= 640  # the window need not grow
    assert top.height() >= LOSS_ROW_MIN_HEIGHT
    assert dash.banners.height() >= min(BANNERS_MIN_HEIGHT, dash.banners.sizeHint().height())
    squeezed = top.height()
    dash.resize(1920, 1000)
    qtbot.waitUntil(lambda: dash.banners.verticalScrollBar().maximum() == 0, timeout=10_000)
    assert dash.banners.height() >= panel.height() + dash.model_bar.height()
    assert top.height() > squeezed
