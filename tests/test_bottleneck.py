"""The split of a step and the verdict (pure logic); RunCurves keeping each task's split, and
Compare and the run history reading the same verdict from a bundle."""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from training_events import write_run

from dtgui.core.bottleneck import (
    COMMUNICATION,
    COMPUTE,
    INPUT,
    REPORTING,
    RunFacts,
    StepSplit,
    verdict,
)
from dtgui.core.compare import CSV_FIELDS, FIELDS, summarize_run, summary_csv, table_rows
from dtgui.core.events import parse_line, read_all
from dtgui.core.run_curves import RunCurves
from dtgui.launch.history import open_run
from dtgui.worker.step_timing import Calibration, StepTiming, calibration_run_steps


def split(task: str, input: float = 0.0, compute: float = 0.0, communication: float = 0.0,
          reporting: float = 0.0) -> StepSplit:
    return StepSplit(task=task, step=100, input=input, compute=compute,
                     communication=communication, reporting=reporting)


def test_input_bound_names_the_worst_task_its_share_and_the_input_advice() -> None:
    found = verdict([split("worker:0", input=0.010, compute=0.020, communication=0.002),
                     split("worker:1", input=0.062, compute=0.036, reporting=0.002)])
    assert (found.limit, found.task) == (INPUT, "worker:1")
    assert round(found.share, 2) == 0.62
    assert found.figure == "input wait 62 % of each step on worker:1"
    assert "prefetch(tf.data.AUTOTUNE)" in found.text and "num_parallel_calls" in found.advice
    assert found.short == "input 62 % (worker:1)"


def test_communication_bound_advises_larger_batches_and_fewer_hosts_over_a_slow_link() -> None:
    found = verdict([split("worker:0", input=0.001, compute=0.010, communication=0.030)],
                    RunFacts(hosts=2, per_replica_batch=32))
    assert found.limit == COMMUNICATION and round(found.share * 100) == 73
    assert "larger batch per replica (now 32)" in found.advice
    assert "fewer machines" in found.advice
    single = verdict([split("worker:0", compute=0.010, communication=0.030)])
    assert "fewer machines" not in single.advice


def test_compute_bound_advises_only_what_the_run_does_not_do_already() -> None:
    splits = [split("worker:0", input=0.001, compute=0.050, communication=0.002,
                    reporting=0.0001)]
    found = verdict(splits, RunFacts(gpu=True))
    assert found.limit == COMPUTE and found.share > 0.9
    assert "mixed precision" in found.advice and "XLA" in found.advice
    assert "XLA" not in verdict(splits, RunFacts(gpu=True, xla=True)).advice
    assert "mixed precision" not in verdict(splits, RunFacts(gpu=False)).advice


def test_reporting_is_called_out_only_past_its_threshold_and_nothing_before_a_split() -> None:
    assert verdict([split("chief:0", compute=0.010, reporting=0.002)]).limit == REPORTING
    assert verdict([split("chief:0", compute=0.010, reporting=0.0001)]).limit == COMPUTE
    empty = verdict([])
    assert not empty.known and empty.short == "" and "not measured" in empty.text


def test_a_split_event_is_read_compatibly_and_the_reducer_keeps_each_tasks_window() -> None:
    """Each task's split is its last few events' (weighted by their steps), the latest's
    step and cost; a task not measured yet says from when it will be."""
    lines = [
        '{"v":2,"kind":"split","task":"worker:1","t":1.0,"step":10,"input":0.03,'
        '"compute":0.01,"communication":0.0,"reporting":0.0001,"calibration_seconds":0.2,'
        '"training_seconds":10.0,"steps":10}',
        '{"v":2,"kind":"split","task":"worker:1","t":2.0,"step":40,"input":0.001,'
        '"compute":0.01,"communication":0.0,"reporting":0.0001,"future_field":1,"steps":30}',
        '{"v":2,"kind":"split","task":"worker:3","t":2.0,"step":4,"steps":0,'
        '"deferred_until":120.5,"training_seconds":0.4}',
        '{"v":2,"kind":"split","task":"worker:0","t":2.0,"step":20,"input":"bad"}',
        '{"v":2,"kind":"split","task":"worker:2","t":2.0,"compute":0.01,'
        '"measured":["compute","reporting"],"method":"report"}',
    ]
    events = [e for e in (parse_line(x) for x in lines) if e is not None]
    assert len(events) == 5
    curves = RunCurves()
    curves.add_events(events)
    assert set(curves.splits) == {"worker:1", "worker:2"}  # worker:0 held no time
    assert curves.split_deferred == {"worker:3": 120.5}
    window = curves.splits["worker:1"]
    assert window.step == 40 and window.steps == 40
    assert window.input == pytest.approx((10 * 0.03 + 30 * 0.001) / 40)
    first = StepSplit.from_event("worker:1", events[0].data)
    assert first is not None and abs(first.cost_share - 0.02) < 1e-9  # 0.2 s of 10 s
    script = curves.splits["worker:2"]
    assert script.measured == (COMPUTE, REPORTING) and script.method == "report"
    # a part a task did not measure never makes the verdict
    assert verdict([script]).limit == COMPUTE


def test_compare_and_the_history_read_the_same_verdict_from_a_bundle(tmp_path: Path) -> None:
    record = write_run(tmp_path, "slowdata", steps=40, steps_per_epoch=20)
    events = Path(record.bundle) / "output" / "events-worker-0.jsonl"
    with events.open("a", encoding="utf-8") as f:
        for step, wait in ((20, 0.001), (40, 0.062)):  # the run's last splits, averaged
            f.write(json.dumps({"v": 2, "kind": "split", "task": "worker:0", "t": 2e9,
                                "step": step, "input": wait, "compute": 0.036,
                                "communication": 0.002}) + "\n")
    summary = summarize_run(record.bundle)
    assert (summary.limit.limit, summary.limit.task) == (INPUT, "worker:0")
    [row] = table_rows([summary])
    assert dict(zip(FIELDS, row, strict=True))["Limited by"] == "input 45 % (worker:0)"
    csv_row = dict(zip(CSV_FIELDS, next(csv.reader(io.StringIO(
        summary_csv([summary]).splitlines()[1]))), strict=True))
    assert (csv_row["limited_by"], csv_row["limited_task"]) == ("input", "worker:0")
    assert float(csv_row["limited_share"]) == pytest.approx(0.0315 / 0.0695, abs=1e-3)
    assert open_run(record).limit() == summary.limit  # the run history's view


def test_a_scripts_report_calls_give_its_split_input_wait_through_timed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dtgui.worker import reporting

    path = tmp_path / "events-worker-0.jsonl"
    monkeypatch.setenv("DTGUI_EVENTS_FILE", str(path))
    monkeypatch.setattr(reporting, "_writer", None)
    monkeypatch.setattr(reporting, "_timing", reporting.ScriptTiming())
    monkeypatch.setattr(reporting, "FIRST_SPLIT_SECONDS", 0.1)

    def slow_data() -> Iterator[int]:
        for i in range(15):
            time.sleep(0.02)  # the script's input pipeline
            yield i

    for step, _ in enumerate(reporting.timed(slow_data()), 1):
        time.sleep(0.002)  # its compute
        reporting.report(step, loss=1.0 / step)
    assert reporting._writer is not None
    reporting._writer.close()
    splits = [e for e in read_all(path) if e.kind == "split"]
    assert splits
    split = StepSplit.from_event("worker:0", splits[0].data)
    assert split is not None and split.method == "report"
    assert split.measured == (INPUT, COMPUTE, REPORTING)  # its communication is its compute's
    assert split.share(INPUT) > 0.6
    found = verdict([split])
    assert found.limit == INPUT and "prefetch" in found.advice


def test_calibrations_cost_at_most_one_percent_of_the_steps_between_them() -> None:
    """A large call (a fast model) calibrates every CALIBRATE_EVERY_CALLS calls at most; a call
    of one slow step (a large model) waits until the calibration runs' steps are 1 % of the
    steps since."""
    from dtgui.worker.step_timing import (
        CALIBRATE_EVERY_CALLS,
        calibration_run_steps,
        calibration_steps,
        next_calibration,
    )

    assert next_calibration(4, 1000) == 4 + CALIBRATE_EVERY_CALLS
    assert next_calibration(4, 1) == 4 + calibration_steps(calibration_run_steps(1)) * 100 == 7204
    for k in (1, 2, 3, 7, 16, 64, 200, 1000, 5000):
        between = (next_calibration(10, k) - 10) * k
        assert calibration_steps(calibration_run_steps(k)) <= 0.01 * between, k


def simulate(calls: int, k: int, call_seconds: float, first_call: float,
             setup: float, per_calibration: float) -> tuple[list[int], StepTiming]:
    """A task's calls as Progress makes them, each calibration taking `per_calibration`
    seconds (and `setup` more the first time); the calls at which it calibrated."""
    timing = StepTiming(active=True)
    calibrated = []
    for call in range(1, calls + 1):
        wished = timing.wish(k)  # carried by the call (MultiWorkerMirrored: every task's)
        timing.call(k, first_call if call == 1 else call_seconds)
        timing.reported(0.0005, call * k)
        if timing.calibrate_now(k, wished):
            made = setup if not calibrated else 0.0
            timing.calibrated(Calibration(step=0.001, reduce=0.0, setup=made),
                              per_calibration + made, calibration_run_steps(k))
            calibrated.append(call)
            # what it took so far, honestly counted, within the budget of the training time
            assert timing.calibration_seconds <= timing.budget * timing.training_seconds
    return calibrated, timing


def test_measuring_takes_at_most_one_percent_of_the_training_time_short_runs_included() -> None:
    """What the calibrations take, making their runs included, stays within 1 % of the
    training time: a short run is not measured (its split event says from when it would be),
    a longer one once its training paid for it, then as the budget allows."""
    from dtgui.worker.step_timing import SPLIT_BUDGET

    # a 100-step run (the demo, 5 ms steps): never measured, and told so at the end
    short, timing = simulate(calls=10, k=10, call_seconds=0.05, first_call=2.0, setup=0.3,
                             per_calibration=0.2)
    assert short == [] and timing.deferred_due(final=True)
    told = timing.deferred_fields(10)
    assert told["deferred_until"] > timing.training_seconds and "calibration_seconds" not in told
    # a long run: its first calibration once the training pays for it (making the runs is
    # guessed from the first call until measured), later ones as the budget allows
    long, timing = simulate(calls=3000, k=40, call_seconds=0.2, first_call=2.0, setup=0.3,
                            per_calibration=0.2)
    assert len(long) >= 2 and long[0] > 100
    assert timing.calibration_seconds <= SPLIT_BUDGET * timing.training_seconds
    fields = timing.split_fields()
    assert StepSplit.from_event("worker:0", fields) is not None
    cost = StepSplit.from_event("worker:0", fields).cost_share  # type: ignore[union-attr]
    assert cost == pytest.approx(timing.calibration_seconds / timing.training_seconds, rel=1e-3)
    assert 0 < cost <= SPLIT_BUDGET


def test_the_parameter_server_coordinator_splits_each_workers_step_from_its_own_timing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ParameterServer each call times itself on its worker (seconds, input wait, the
    worker's index) and a round-trip run calibrates communication: the coordinator keeps
    one split per worker, never counts an untimed call, and schedules the calibration
    runs again while a training worker has had none."""
    from dtgui.worker.step_timing import (
        BUDGET_VARIABLE,
        FIRST_CALIBRATION_CALL,
        WorkerStepTimings,
    )

    monkeypatch.setenv(BUDGET_VARIABLE, "100")  # these few calls pay for any calibration

    timing = WorkerStepTimings(active=True)
    calibrations = []
    for call in range(1, 9):
        timing.scheduled()
        if timing.calibrate_now(10):
            calibrations.append(call)
            if call == FIRST_CALIBRATION_CALL:  # the calibration runs all went to worker 0
                timing.calibrated({0: 0.004}, {0: 0.05}, setup=0.3)
        timing.call(call % 2, 10, seconds=0.1, input_wait=0.03 * (call % 2), last_step=10 * call)
        timing.call(-1, 10, seconds=5.0, input_wait=5.0, last_step=10 * call)  # not timed
    # the calibration runs came again while worker 1 trained without a round trip, a few times
    # at most
    assert calibrations[0] == FIRST_CALIBRATION_CALL and len(calibrations) > 1
    assert len(calibrations) <= 1 + WorkerStepTimings.RETRIES
    timing.calibrated({1: 0.006}, {1: 0.07}, setup=0.0)
    due = dict(timing.splits_due(final=True))
    assert set(due) == {0, 1}
    zero, one = (StepSplit.from_event("chief:0", {**due[w], "of_task": f"worker:{w}"})
                 for w in (0, 1))
    assert zero is not None and one is not None and one.task == "worker:1"
    assert zero.measured == one.measured == (INPUT, COMPUTE, COMMUNICATION)
    assert one.input == pytest.approx(0.003) and one.communication == pytest.approx(0.006)
    assert one.compute == pytest.approx(0.001) and one.reporting == 0
    assert zero.input == 0 and zero.communication == pytest.approx(0.004)
    assert zero.setup_seconds == pytest.approx(0.3) and one.calibration_seconds == 0.07
    assert zero.calibration_seconds == pytest.approx(0.35)  # making the run counted too
    assert verdict([zero, one]).limit == COMMUNICATION


def test_a_device_near_its_memory_limit_is_the_runs_first_limit_with_the_time_beside_it(
        tmp_path: Path) -> None:
    """Out-of-memory ends a run where slowness does not: a GPU that reached 93 % of its
    memory is what the verdict names first (with what to change), in the dashboard's line,
    Compare and the run history alike; where the step time goes stays beside it."""
    record = write_run(tmp_path, "fullgpu", steps=40, steps_per_epoch=20)
    events = Path(record.bundle) / "output" / "events-worker-0.jsonl"
    total = 85520809984
    gpu = {"kind": "gpu", "index": 0, "name": "NVIDIA H100 80GB HBM3", "util": 97.0,
           "mem_total": total}
    with events.open("a", encoding="utf-8") as f:
        for used in (0.5, 0.93, 0.6):  # the fullest sample counts
            f.write(json.dumps({"v": 2, "kind": "device", "task": "worker:0", "t": 2e9,
                                "devices": [{**gpu, "mem_used": int(used * total)}]})
                    + "\n")
        f.write(json.dumps({"v": 2, "kind": "split", "task": "worker:0", "t": 2e9, "step": 40,
                            "input": 0.062, "compute": 0.036, "communication": 0.002}) + "\n")
    summary = summarize_run(record.bundle)
    found = summary.limit
    assert (found.limit, found.task, found.device) == ("memory", "worker:0", "gpu0")
    assert found.share == pytest.approx(0.93, abs=1e-3)
    assert found.figure == "memory 93 % full on worker:0 gpu0"
    assert "smaller per-replica batch" in found.advice
    assert found.time is not None and found.time.limit == INPUT
    assert found.text.endswith("Step time: " + found.time.text)
    [row] = table_rows([summary])
    assert dict(zip(FIELDS, row, strict=True))["Limited by"] == "memory 93 % (worker:0)"
    assert open_run(record).limit() == found
    # without the memory, the same splits give the step time's verdict alone
    assert verdict([StepSplit("worker:0", input=0.062, compute=0.036)]).limit == INPUT
