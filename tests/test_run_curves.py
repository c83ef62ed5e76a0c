"""One reducer of events into curves: the dashboard, Compare, the history and the final loss
agree, restarts included."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from training_events import AGAIN_SHIFT, T0, write_run

from dtgui.core.events import Event, read_all
from dtgui.core.live_run import LiveRun
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.run_curves import RunCurves, bundle_curves, final_loss_of_bundle
from dtgui.core.run_devices import RunDevices
from dtgui.core.runs.compare import summarize_run
from dtgui.core.runs.records import RECORD_NAME, RunHistory, RunRecord
from dtgui.launch.runs.history import open_run
from dtgui.launch.start.pipeline import launch_plan
from dtgui.launch.targets import Target


def dashboard_of(record: RunRecord) -> LiveRun:
    """The dashboard's metrics of a run, fed as a live run feeds them: a poll at a time."""
    metrics = LiveRun()
    events = read_all(Path(record.bundle) / "output" / "events-worker-0.jsonl")
    for i in range(0, len(events), 7):
        metrics.add_events(events[i: i + 7])
    return metrics


@pytest.mark.parametrize("restart", [(90, 40), (90, 0)], ids=["from-step-40", "from-scratch"])
def test_compare_and_the_dashboard_agree_after_a_restart(tmp_path: Path,
                                                         restart: tuple[int, int]) -> None:
    """The run trained to step 90 (validating at 40 and 80), restarted from `resumed` and
    trained to 120 again: both views drop the rewound points, the re-trained ones count."""
    crashed, resumed = restart
    record = write_run(tmp_path, "restarted", steps=120, steps_per_epoch=40, restart=restart)
    summary = summarize_run(record.bundle, "restarted")
    live = dashboard_of(record).snapshot()
    opened = open_run(record).metrics.snapshot()
    for snap in (live, opened):
        for name, curve in summary.validation.items():
            steps, values = snap.validation[name]
            assert steps.tolist() == curve.steps.tolist() == [40, 80, 120]
            np.testing.assert_allclose(values, curve.values)
        assert set(snap.validation) == set(summary.validation)
        steps, _ = snap.replica_loss[0]
        assert steps.tolist() == summary.loss.steps.tolist() == list(range(1, 121))
    val_steps = summary.validation["loss"].steps.tolist()
    assert val_steps == [40, 80, 120]  # each once, none drawn back
    first_pass = write_run(tmp_path, "plain", steps=120, steps_per_epoch=40).bundle
    plain = summarize_run(first_pass).validation["loss"].values
    again = summary.validation["loss"].values
    kept_from_first = 1 if resumed >= 40 else 0  # step 40's validation survives a resume at 40
    np.testing.assert_allclose(again[:kept_from_first], plain[:kept_from_first])
    np.testing.assert_allclose(again[kept_from_first:], plain[kept_from_first:] + AGAIN_SHIFT)
    # the mean loss: the steps after the checkpoint as trained the second time
    assert np.all(summary.loss.values[resumed:] > AGAIN_SHIFT)
    assert np.all(np.diff(summary.loss.seconds) >= 0)
    assert crashed > resumed


def test_final_loss_is_the_same_from_every_reader(tmp_path: Path) -> None:
    record = write_run(tmp_path, "restarted", steps=120, steps_per_epoch=40, restart=(90, 40))
    expected = record.final_loss
    assert expected is not None
    assert summarize_run(record.bundle).final_loss == pytest.approx(expected)  # Compare
    assert dashboard_of(record).final_loss() == pytest.approx(expected)  # a live run
    assert open_run(record).final_loss == pytest.approx(expected)  # the history's dashboard
    assert final_loss_of_bundle(record.bundle) == pytest.approx(expected)
    (Path(record.bundle) / RECORD_NAME).unlink()  # a bundle of an older dtgui: from events
    found = RunHistory(tmp_path).records()
    assert [r.final_loss for r in found] == [pytest.approx(expected)]


def test_a_launched_runs_final_loss_is_the_same_in_its_record_and_every_view(
        tmp_path: Path, stub_python: Callable[..., str]) -> None:
    """Two MultiWorkerMirrored workers (stub training, real supervisor and controller): the
    controller's final loss, saved in the record, is what Compare and the history show."""
    plan = Plan(run_name="final", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                replicas_per_task=1, steps=20, checkpoint_every=0)
    controller = launch_plan(plan, tmp_path / "runs",
                             targets=[Target(python=stub_python(step_seconds=0.005))])
    assert controller.wait(120), "the run did not end in time"
    assert controller.state == "finished", controller.message
    loss = controller.final_loss
    assert loss is not None
    record = RunRecord.load(controller.bundle.path)
    assert record.final_loss == loss
    assert summarize_run(record.bundle).final_loss == loss
    assert open_run(record).final_loss == loss
    assert final_loss_of_bundle(record.bundle) == loss


def event(kind: str, task: str = "worker:0", t: float = T0, **data: object) -> Event:
    return Event(kind, task, t, {"v": 2, "kind": kind, "task": task, "t": t, **data})


def steps(first: int, losses: list[float], task: str = "worker:0", t: float = T0,
          **data: object) -> Event:
    return event("step", task, t, step=first, replica_losses=losses, replica_ids=[0],
                 loss=float(np.mean(losses)), **data)


def test_final_loss_without_a_finished_event_is_the_main_tasks_last_step() -> None:
    curves = RunCurves()
    # two workers report the same mean; the first in task order stands for the run, in
    # whichever order their events arrive
    curves.add_events([steps(1, [2.0], "worker:1"), steps(2, [1.5], "worker:1")])
    curves.add_events([steps(1, [2.0]), steps(2, [1.25])])
    assert curves.main_task == "worker:0" and curves.final_loss() == 1.25
    assert curves.loss_curve().values.tolist() == [2.0, 1.25]
    # a restart from step 1: the final loss is step 1's until step 2 is trained again
    curves.add_events([event("started", resumed_from_step=1, replica_ids=[0])])
    assert curves.final_loss() == 2.0
    curves.add_events([steps(2, [0.5]), event("finished", loss=0.5)])
    assert curves.final_loss() == 0.5


def test_a_scripts_final_loss_is_its_loss_scalar_else_its_finished_loss() -> None:
    curves = RunCurves()
    curves.add_events([event("scalar", tag="train/epoch_loss", step=e, value=1.0 / (e + 1))
                       for e in range(3)])
    assert curves.main_task == "worker:0" and curves.final_loss() == pytest.approx(1 / 3)
    curves.add_events([event("finished", loss=0.3)])
    assert curves.final_loss() == 0.3


def test_a_scripts_loss_curve_is_its_loss_scalar_with_wall_times() -> None:
    """A script reports no steps: Compare draws the loss scalar the dashboard draws."""
    metrics = LiveRun()
    scalars = [event("scalar", t=T0 + e, tag="epoch_loss", step=e, value=1.0 / (e + 1))
               for e in range(4)]
    scalars.insert(3, event("scalar", t=T0 + 2.5, tag="epoch_loss", step=1, value=0.9))
    metrics.add_events([event("started", t=T0 - 1), *scalars])  # restarted after epoch 2
    curve = metrics.curves.loss_curve()
    steps, values = metrics.scalars.loss_series()["worker:0"]
    assert curve.steps.tolist() == steps.tolist() == [0, 1, 3]  # epoch 1 again, then 3
    assert curve.values.tolist() == values.tolist() == [1.0, 0.9, 1 / 4]
    assert curve.seconds.tolist() == [1.0, 3.5, 4.0]  # since the first event
    assert metrics.final_loss() == 0.25


def test_the_parameter_server_chief_gives_the_final_loss(tmp_path: Path) -> None:
    curves = RunCurves()
    curves.add_events([event("finished", "worker:0", loss=None),  # a server task ends
                       steps(1, [0.7], "chief:0"), event("finished", "chief:0", loss=0.7)])
    assert curves.main_task == "chief:0" and curves.final_loss() == 0.7


def test_bundle_curves_read_every_tasks_events_file(tmp_path: Path) -> None:
    record = write_run(tmp_path, "one", steps=40, steps_per_epoch=20)
    curves = bundle_curves(record.bundle)
    assert curves.steps_done() == 40 and curves.span() > 0
    plan = json.loads((Path(record.bundle) / "plan.json").read_text())
    assert plan["steps"] == curves.total_steps


def test_a_device_event_reaches_every_view_through_one_fold(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A `device` sample is folded once, by RunCurves' RunDevices: the live dashboard's device
    plots, the memory peaks, the use while training, the traffic and the CPU load all come
    from that one fold, and a run read back (Compare, the history) gets the same from it."""
    folds: list[str] = []
    fold = RunDevices.add

    def counted(self: RunDevices, ev: Event, *args: Any) -> None:
        folds.append(ev.task)
        fold(self, ev, *args)

    monkeypatch.setattr(RunDevices, "add", counted)

    def sample(t: float, util: float, own: float, task: str) -> Event:
        return event("device", task, t, net={"rx": 1e6 * t, "tx": 2e6},
                     devices=[{"kind": "gpu", "index": 0, "util": util, "mem_used": 3 << 30,
                               "mem_total": 16 << 30, "name": "T4"},
                              {"kind": "cpu", "index": 0, "util": 60.0, "task_util": own,
                               "mem_used": 1 << 30, "host": "h2"}])

    events = [event("started", "worker:0", T0, steps=10),
              event("started", "worker:1", T0, steps=10),
              *(ev for i in range(3) for ev in (sample(T0 + 1 + i, 50.0 + i, 20.0, "worker:0"),
                                                sample(T0 + 1 + i, 70.0, 10.0, "worker:1")))]
    live = LiveRun()
    live.set_task_machine("worker:0", "h2")
    live.set_task_machine("worker:1", "h2")
    live.add_events(events)
    assert folds == ["worker:0", "worker:1"] * 3  # each sample once, nothing else
    snap = live.snapshot()
    # two tasks on machine h2: its GPU is drawn once, from the first task reporting it; the
    # CPU's memory is both tasks' own
    assert set(snap.device_util) == set(snap.device_mem) == {"h2 gpu0", "h2 cpu0"}
    assert snap.device_util["h2 gpu0"][1].tolist() == [50.0, 51.0, 52.0]
    assert snap.device_mem["h2 cpu0"][1].tolist() == [1024, 2048, 2048]
    held = live.curves.devices.util["h2 gpu0"].view()[1]
    assert np.shares_memory(snap.device_util["h2 gpu0"][1], held)  # a view, not a copy
    assert [(d.task, d.device, d.peak) for d in snap.memory.devices()] == [
        ("worker:0", "gpu0", 3 << 30), ("worker:0", "cpu0", 1 << 30),
        ("worker:1", "gpu0", 3 << 30), ("worker:1", "cpu0", 1 << 30)]
    assert [(d.task, d.device, d.samples) for d in snap.device_use.devices()] == [
        ("worker:0", "gpu0", 3), ("worker:0", "cpu0", 3),
        ("worker:1", "gpu0", 3), ("worker:1", "cpu0", 3)]
    assert {load.task: load.own for load in snap.loads} == pytest.approx(
        {"worker:0": 0.3, "worker:1": 0.3})  # the run's own share of h2: both tasks'
    # a run read back folds the same events through the same path and shows the same
    folds.clear()
    read_back = RunCurves()
    read_back.add_events(events)
    assert len(folds) == 6
    assert read_back.memory.devices() == snap.memory.devices()
    assert read_back.device_use.devices() == snap.device_use.devices()
    assert read_back.device_use.traffic() == snap.device_use.traffic()
    assert read_back.cpu_loads() == snap.loads


def test_a_stopped_then_resumed_run_has_a_gap_in_its_device_plots_however_short() -> None:
    """Stopped after 3 s and resumed 8 s later (less than GAP_SECONDS): the series hold a
    NaN point between the last sample before the stop and the first after the resume, so
    the plot leaves a gap there; a first start makes none."""
    def sample(t: float, util: float) -> Event:
        return event("device", "worker:0", t,
                     devices=[{"kind": "cpu", "index": 0, "util": util, "mem_used": 1 << 30}])

    curves = RunCurves()
    curves.add_events([sample(T0 - 0.5, 5.0), event("started", "worker:0", T0, steps=100),
                       *(sample(T0 + i, 80.0) for i in (1, 2, 3)),
                       event("started", "worker:0", T0 + 10, steps=100, resumed_from_step=50),
                       *(sample(T0 + i, 70.0) for i in (11, 12))])
    xs, ys = curves.devices.util["worker:0 cpu0"].view()
    assert xs.tolist()[:4] == [0.0, 1.5, 2.5, 3.5]  # the first start: no gap
    assert np.isnan(ys).tolist() == [False] * 4 + [True] + [False] * 2
    assert 3.5 < xs[4] < 11.5  # the gap lies between the stop and the resume
    assert curves.devices.mem["worker:0 cpu0"].view()[1].size == 7
    # its elapsed time leaves out the 7 s it was stopped (from 3 to 10)
    assert curves.span() == 12.5 and curves.training_span() == 5.5
