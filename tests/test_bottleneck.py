"""The split of a step and the verdict (pure logic); RunCurves keeping each task's split, and
Compare and the run history reading the same verdict from a bundle."""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from training_events import write_run

from dtgui.core.events import parse_line, read_all
from dtgui.core.measure.bottleneck import (
    COMMUNICATION,
    COMPUTE,
    CPU,
    INPUT,
    PART_NAMES,
    REPORTING,
    RunFacts,
    StepSplit,
    verdict,
)
from dtgui.core.measure.split_wait import SplitWait, wait_text
from dtgui.core.run_curves import RunCurves
from dtgui.core.runs.compare import CSV_FIELDS, FIELDS, summarize_run, summary_csv, table_rows
from dtgui.launch.runs.history import open_run
from dtgui.worker.step_timing import (
    FIRST_CALIBRATION_SECONDS,
    FIRST_MINUTE,
    SPLIT_BUDGET,
    Calibration,
    StepTiming,
    allowed,
    calibration_run_steps,
    needed,
    smallest_calibration,
)


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
        '{"v":2,"kind":"split","task":"worker:4","t":2.0,"step":4,"steps":0,'
        '"deferred_clock":12.25,"clock_seconds":3.1,"training_seconds":0.4}',
        '{"v":2,"kind":"split","task":"worker:0","t":2.0,"step":20,"input":"bad"}',
        '{"v":2,"kind":"split","task":"worker:2","t":2.0,"compute":0.01,'
        '"measured":["compute","reporting"],"method":"report"}',
    ]
    events = [e for e in (parse_line(x) for x in lines) if e is not None]
    assert len(events) == 6
    curves = RunCurves()
    curves.add_events(events)
    assert set(curves.splits) == {"worker:1", "worker:2"}  # worker:0 held no time
    # from when, on the clock since training began (an older event: seconds of training)
    assert curves.split_deferred == {"worker:3": SplitWait(120.5),
                                     "worker:4": SplitWait(12.25, 3.1)}
    window = curves.splits["worker:1"]
    assert window.step == 40 and window.steps == 40
    assert window.input == pytest.approx((10 * 0.03 + 30 * 0.001) / 40)
    first = StepSplit.from_event("worker:1", events[0].data)
    assert first is not None and abs(first.cost_share - 0.02) < 1e-9  # 0.2 s of 10 s
    assert first.cost_text == "measuring took 0.2 s of 10 s training (2 %)"
    # said against the clock since training began when the event has it
    clocked = StepSplit.from_event("worker:1", {**events[0].data, "clock_seconds": 65.0})
    assert clocked is not None
    assert clocked.cost_text == "measuring took 0.2 s of 1 min 05 s training (0.31 %)"
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
             setup: float, per_calibration: float) -> tuple[list[tuple[int, float]], StepTiming]:
    """A task's calls as Progress makes them, on a clock of their own, each calibration taking
    `per_calibration` seconds (and `setup` more the first time), or less as CalibrationRuns
    sizes its runs to the seconds the budget allows then; (call, seconds into training) of
    each calibration."""
    now = [0.0]
    timing = StepTiming(active=True, clock=lambda: now[0])
    calibrated: list[tuple[int, float]] = []
    for call in range(1, calls + 1):
        wished = timing.wish(k)  # carried by the call (MultiWorkerMirrored: every task's)
        seconds = first_call if call == 1 else call_seconds
        timing.call(k, seconds)
        timing.reported(0.0005, call * k)
        now[0] += seconds + 0.0005
        if timing.calibrate_now(k, wished):
            made = setup if not calibrated else 0.0
            runs = min(per_calibration, max(0.01, timing.allowance() - made))
            timing.calibrated(Calibration(step=0.001, reduce=0.0, setup=made,
                                          n=calibration_run_steps(k)),
                              runs + made, calibration_run_steps(k))
            now[0] += runs + made
            calibrated.append((call, timing.clock()))
            # what it took so far, honestly counted, within what the time so far allows
            assert timing.calibration_seconds <= allowed(timing.clock()) + 1e-9
    return calibrated, timing


def test_measuring_may_take_five_percent_of_the_first_minute_and_one_percent_of_a_long_run(
) -> None:
    """What measuring may have taken after t seconds of training: 5 % of the first minute,
    then no more until 1 % of the whole is more (five minutes on): a run of ten minutes or
    more spends at most 1 %, at most 6 s at ten minutes; `needed` inverts it."""
    assert allowed(10) == pytest.approx(0.5) and allowed(60) == pytest.approx(3.0)
    assert allowed(200) == pytest.approx(3.0) and allowed(600) == pytest.approx(6.0)
    assert allowed(3600) == pytest.approx(36.0)
    for t in (0.5, 10, 59, 120, 299, 600, 5000):
        assert needed(allowed(t)) <= t + 1e-9 and allowed(needed(allowed(t))) == \
            pytest.approx(allowed(t))
    assert needed(FIRST_CALIBRATION_SECONDS) == pytest.approx(20.0)
    assert allowed(10, budget=1e6) > 1e5  # the tests' "any cost"


def test_measuring_takes_at_most_five_percent_of_the_first_minute_short_runs_included() -> None:
    """The first calibration's runs are sized to FIRST_CALIBRATION_SECONDS: it comes once
    the training pays for them (about 20 s), so every run past that is measured in its first
    minute; a shorter run is not, and its split event says from when it would be, on the
    clock since training began. Later calibrations come as the budget allows: 1 % of a long
    run."""
    # a 100-step run (the demo, 5 ms steps): never measured, and told so at the end
    short, timing = simulate(calls=10, k=10, call_seconds=0.05, first_call=2.0, setup=0.3,
                             per_calibration=0.2)
    assert short == [] and timing.deferred_due(final=True)
    told = timing.deferred_fields(10)
    assert told["deferred_clock"] == pytest.approx(needed(FIRST_CALIBRATION_SECONDS), rel=1e-3)
    assert told["deferred_clock"] > told["clock_seconds"] > told["training_seconds"]
    assert "calibration_seconds" not in told
    # the demo over ten minutes at 0.2 s calls: measured in its first 25 s of training, the
    # whole within 1 % of it
    long, timing = simulate(calls=3000, k=40, call_seconds=0.2, first_call=2.0, setup=0.3,
                            per_calibration=0.2)
    assert len(long) >= 2 and long[0][1] <= 25
    assert timing.clock() >= 600
    assert timing.calibration_seconds <= SPLIT_BUDGET * timing.clock()
    fields = timing.split_fields()
    split = StepSplit.from_event("worker:0", fields)
    assert split is not None and split.clock_seconds == pytest.approx(timing.clock(), rel=1e-3)
    cost = split.cost_share
    assert cost == pytest.approx(timing.calibration_seconds / timing.clock(), rel=1e-3)
    assert 0 < cost <= SPLIT_BUDGET
    # an input-bound model (one slow step a call): measured within the first minute as well
    slow, _ = simulate(calls=600, k=1, call_seconds=0.15, first_call=3.0, setup=0.4,
                       per_calibration=0.3)
    assert slow and slow[0][1] <= FIRST_MINUTE


def test_slow_steps_put_off_the_first_calibration_until_the_budget_pays_for_its_runs() -> None:
    """Runs of one step are the least a calibration can be sized to. The first try comes about
    twenty seconds in, as for any run, and times a step on cached data (an input-bound step
    says nothing of it); with steps of a second (four machines sharing loaded cores) even
    those runs take about twenty of them, so it is put off, its cost counted, and not wished
    again while the budget does not pay for them (not in the first ten minutes); fast steps
    still calibrate at about twenty seconds."""
    now = [0.0]
    timing = StepTiming(active=True, clock=lambda: now[0])
    tried_at = wished_at = None
    for call in range(1, 600):
        timing.call(5, 5.0)
        timing.reported(0.001, 5 * call)
        now[0] += 5.001
        if not timing.wish(5):
            continue
        if tried_at is not None:
            wished_at = timing.clock()
            break
        tried_at = timing.clock()
        timing.put_off(Calibration(step=1.0, reduce=0.0, input=0.01, setup=0.5, n=0), 2.5)
    assert tried_at == pytest.approx(needed(FIRST_CALIBRATION_SECONDS), abs=5.1)
    assert timing.calibration_seconds == 2.5 and timing.setup_seconds == 0.5
    cost = smallest_calibration(1.0) + 0.01
    assert cost > 15 * FIRST_CALIBRATION_SECONDS
    assert wished_at is not None and wished_at > 600
    assert allowed(wished_at) - 2.5 >= cost - 1e-6 > allowed(wished_at - 5.001) - 2.5
    now[0] = 0.0
    fast = StepTiming(active=True, clock=lambda: now[0])
    for _ in range(1, 200):
        fast.call(40, 0.2)
        now[0] += 0.2
        if fast.wish(40):
            break
    assert fast.clock() == pytest.approx(needed(FIRST_CALIBRATION_SECONDS), abs=0.3)


def test_the_parameter_server_coordinator_splits_each_workers_step_from_its_own_timing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ParameterServer each call times itself on its worker (seconds, input wait, the
    worker's index) and a round-trip run calibrates communication: the coordinator keeps
    one split per worker, never counts an untimed call, and schedules the calibration
    runs again while a training worker has had none."""
    from dtgui.worker.ps_step_timing import WorkerStepTimings
    from dtgui.worker.step_timing import BUDGET_VARIABLE, FIRST_CALIBRATION_CALL

    monkeypatch.setenv(BUDGET_VARIABLE, "1e6")  # these few calls pay for any calibration

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
    # a round trip timed alone longer than the worker's step past its input wait: compute is
    # not told apart from communication on that worker, and its split says so
    timing.call(2, 10, seconds=0.1, input_wait=0.02, last_step=100)
    timing.calibrated({2: 0.02}, {2: 0.07}, setup=0.0)
    timing.call(2, 10, seconds=0.1, input_wait=0.02, last_step=110)
    two = StepSplit.from_event("chief:0", {**dict(timing.splits_due(final=True))[2],
                                           "of_task": "worker:2"})
    assert two is not None and two.measured == (INPUT, COMMUNICATION)
    assert two.compute == 0 and two.communication == pytest.approx(0.008)
    # ... and the verdict weighs the communication of the workers that told it apart only
    assert two.share(COMMUNICATION) > one.share(COMMUNICATION)
    assert verdict([zero, one, two]).task == verdict([zero, one]).task


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


# The verdict's hysteresis, as a table: (the limit shown, input share of a step, the limit
# then). BOUND_SHARE is 0.25 and HYSTERESIS 0.05: input enters past 0.30, leaves below 0.20.
HYSTERESIS_TABLE = [
    ("", 0.27, COMPUTE),  # a new verdict: input must pass 0.30
    ("", 0.31, INPUT),
    (COMPUTE, 0.29, COMPUTE),  # noise around the threshold does not flip it
    (COMPUTE, 0.31, INPUT),
    (INPUT, 0.22, INPUT),  # once shown, input stays until below 0.20
    (INPUT, 0.19, COMPUTE),
]


@pytest.mark.parametrize(("previous", "share", "expected"), HYSTERESIS_TABLE)
def test_the_verdict_does_not_flip_on_noise_around_its_threshold(
        previous: str, share: float, expected: str) -> None:
    step = split("worker:0", input=share, compute=1 - share)
    assert verdict([step], previous=previous).limit == expected


def test_a_window_of_splits_outweighs_one_noisy_split() -> None:
    """A run's last splits as one, by their steps: one loaded window of input wait among
    compute-bound ones leaves the verdict at compute."""
    from dtgui.core.measure.bottleneck import window_split

    steady = [StepSplit("worker:0", step=100 * i, input=0.0005, compute=0.0045, steps=100)
              for i in range(1, 6)]
    noisy = StepSplit("worker:0", step=600, input=0.004, compute=0.005, steps=100)
    assert verdict([noisy]).limit == INPUT
    merged = window_split([*steady, noisy])
    assert merged is not None and merged.step == 600 and merged.steps == 600
    assert verdict([merged]).limit == COMPUTE


# Other processes' CPU, as a table: (step shares (input, compute), machine busy, the task's
# own share, whether the CPU's line was shown, GPU run, the limit then, whether the CPU's line
# is shown beside it). The step's part always leads: freeing the CPU does not speed an input
# pipeline that waits on files or sleeps.
CPU_TABLE = [
    ((0.4, 0.6), 1.00, 0.30, False, False, INPUT, True),  # others take 70 % of a full machine
    ((0.1, 0.9), 1.00, 0.30, False, False, COMPUTE, True),  # compute on the CPU: slowed too
    ((0.1, 0.9), 1.00, 0.30, False, True, COMPUTE, False),  # a GPU's compute is not the CPU's
    ((0.4, 0.6), 1.00, 0.30, False, True, INPUT, True),  # a GPU run's input pipeline is
    ((0.4, 0.6), 0.60, 0.20, False, False, INPUT, False),  # a machine with CPU to spare
    ((0.4, 0.6), 1.00, 0.75, False, False, INPUT, False),  # the run itself fills the machine
    ((0.4, 0.6), 0.92, 0.60, False, False, INPUT, False),  # others 32 %: not past 35 % to enter
    ((0.4, 0.6), 0.92, 0.60, True, False, INPUT, True),  # ...but enough to stay
    ((0.4, 0.6), 0.87, 0.60, True, False, INPUT, True),  # the busy share has hysteresis too
    ((0.4, 0.6), 0.92, 0.70, True, False, INPUT, False),  # others 22 %: below 25 %, it leaves
    ((0.02, 0.08), 1.00, 0.05, False, False, COMPUTE, True),  # a sleeping pipeline: not input
]


@pytest.mark.parametrize(("shares", "busy", "own", "shown", "gpu", "expected", "crowded"),
                         CPU_TABLE)
def test_cpu_taken_by_other_processes_is_named_beside_the_part_it_slows(
        shares: tuple[float, float], busy: float, own: float, shown: bool, gpu: bool,
        expected: str, crowded: bool) -> None:
    from dtgui.core.measure.bottleneck import CpuLoad

    step = split("worker:0", input=shares[0], compute=shares[1])
    found = verdict([step], RunFacts(gpu=gpu), loads=[CpuLoad("worker:0", busy, own)],
                    previous=expected, crowded=shown)
    assert found.limit == expected
    assert found.figure.startswith(f"{PART_NAMES[expected]} ")  # the step's part leads
    assert (found.crowded is not None) == crowded
    if found.crowded is not None:
        line = found.crowded
        assert line.limit == CPU and line.share == pytest.approx(busy - own)
        assert line.figure == (f"other processes take {round((busy - own) * 100)} % of the "
                               "CPU on worker:0's machine")
        assert "close or pause them" in line.advice and "prefetch" not in line.advice
        assert found.text.index(found.figure) < found.text.index(line.figure)
        if expected == INPUT:  # it may not be the answer: the line says when it is not
            assert "only where it computes on the CPU" in line.advice
            assert "a sleep is not sped up" in line.advice
        else:
            assert "slow the compute" in line.advice


def test_an_input_bound_run_on_a_crowded_machine_leads_with_its_input_wait() -> None:
    """A sleeping input pipeline (input wait 99 %) on a machine other sessions fill: the
    headline and the advice are the input's; the CPU's line comes after it."""
    from dtgui.core.measure.bottleneck import CpuLoad

    step = split("worker:0", input=0.099, compute=0.001)
    found = verdict([step], RunFacts(replicas=2),
                    loads=[CpuLoad("worker:0", 0.99, 0.10)], previous=INPUT)
    assert found.limit == INPUT and found.figure == "input wait 99 % of each step on worker:0"
    assert ".prefetch(tf.data.AUTOTUNE)" in found.advice
    assert found.text.startswith("input wait 99 % of each step on worker:0 — the device waits")
    assert found.crowded is not None and "89 % of the CPU" in found.crowded.figure
    # the built-in demo's pipeline is dtgui's, computing on the CPU: slowed for certain
    demo = verdict([step], RunFacts(builtin_data=True),
                   loads=[CpuLoad("worker:0", 0.99, 0.10)])
    assert demo.crowded is not None
    assert "slow the demo's input pipeline" in demo.crowded.advice
    # a memory limit leads; the step time's verdict keeps its CPU line
    from dtgui.core.measure.memory import DeviceMemory

    near = DeviceMemory("worker:0", "gpu0", "GPU", "gpu", peak=97, total=100, fullest=97)
    assert near.near_limit
    both = verdict([step], RunFacts(), [near], loads=[CpuLoad("worker:0", 0.99, 0.10)])
    assert both.limit == "memory" and both.time is not None
    assert both.time.limit == INPUT and both.time.crowded is not None
    assert both.text.index("memory") < both.text.index("input wait") < both.text.index("89 %")


def test_cpu_loads_come_from_the_telemetrys_samples_of_each_task() -> None:
    """The machine's busy % and the task's own % of each `device` event's CPU entry, over
    the last samples; the run's tasks on one machine are not others to each other; an entry
    without the task's own share (an older worker) is none."""
    curves = RunCurves()
    lines = [json.dumps({"v": 2, "kind": "device", "task": task, "t": float(i),
                         "devices": [{"kind": "cpu", "index": 0, "util": busy, "host": "h1",
                                      "task_util": own, "mem_used": 1}]})
             for task in ("worker:0", "worker:1")
             for i, (busy, own) in enumerate([(100.0, 20.0), (96.0, 30.0)])]
    lines.append(json.dumps({"v": 2, "kind": "device", "task": "worker:2", "t": 3.0,
                             "devices": [{"kind": "cpu", "index": 0, "util": 99.0}]}))
    curves.add_events(e for e in (parse_line(x) for x in lines) if e is not None)
    loads = curves.cpu_loads()
    assert [load.task for load in loads] == ["worker:0", "worker:1"]
    for load in loads:  # each task 25 %, the run 50 % of the machine
        assert load.busy == pytest.approx(0.98) and load.own == pytest.approx(0.5)
        assert load.others == pytest.approx(0.48)


# What the verdict advises, as a table: (limit, facts, words it says, words it must not).
WORDING_TABLE = [
    (INPUT, RunFacts(builtin_data=True, replicas=2, per_replica_batch=32),
     ["dtgui's own input pipeline", "fewer replicas", "(now 2)", "larger batch per replica",
      "(now 32)", "free the CPU"], [".prefetch", ".map(", ".cache()", ".interleave()"]),
    (INPUT, RunFacts(), [".prefetch(tf.data.AUTOTUNE)", ".interleave()"], ["demo"]),
    (COMPUTE, RunFacts(), ["XLA (wizard, Options)"], ["mixed precision"]),
    (COMPUTE, RunFacts(gpu=True), ["mixed precision", "XLA"], []),
    (COMPUTE, RunFacts(gpu=True, xla=True, mixed_precision=True),
     ["a faster device or more replicas"], ["XLA"]),
    (CPU, RunFacts(replicas=4), ["other programs", "fewer replicas there (now 4)"],
     [".prefetch"]),
]


@pytest.mark.parametrize(("limit", "facts", "says", "never"), WORDING_TABLE)
def test_the_advice_is_what_the_runs_user_can_act_on(
        limit: str, facts: RunFacts, says: list[str], never: list[str]) -> None:
    from dtgui.core.measure.bottleneck import advice

    text = advice(limit, facts)
    for words in says:
        assert words in text, (words, text)
    for words in never:
        assert words not in text, (words, text)


def test_compare_puts_validation_at_its_steps_training_time() -> None:
    """By wall time a validation point sits where its step was trained (the training
    curve's time base), not when the validation event was written seconds later."""
    lines = []
    for step in range(1, 21):
        lines.append(json.dumps({"v": 2, "kind": "step", "task": "worker:0",
                                 "t": 100.0 + step, "step": step, "replica_ids": [0],
                                 "replica_losses": [1.0 / step], "loss": 1.0 / step}))
        if step % 10 == 0:  # written 7 s after its step (validation takes its time)
            lines.append(json.dumps({"v": 2, "kind": "validation", "task": "worker:0",
                                     "t": 107.0 + step, "step": step, "loss": 0.5}))
    curves = RunCurves()
    curves.add_events(e for e in (parse_line(x) for x in lines) if e is not None)
    loss = curves.loss_curve()
    val = curves.validation_curves()["loss"]
    assert list(val.steps) == [10.0, 20.0]
    for step, seconds in zip(val.steps, val.seconds, strict=True):
        [at] = [s for st, s in zip(loss.steps, loss.seconds, strict=True) if st == step]
        assert seconds == pytest.approx(at)


def test_a_run_stopped_and_resumed_before_its_split_says_what_it_needs() -> None:
    """Measuring starts again with each stretch of training (the budget counts the clock
    since the stretch began): a run stopped and resumed, each stretch too short, says so
    rather than that the run was too short, and a run that ended too short says by how
    much."""
    def started(t: float, resumed: int | None = None) -> str:
        extra = f',"resumed_from_step":{resumed}' if resumed is not None else ""
        return (f'{{"v":2,"kind":"started","task":"worker:0","t":{t},"replica_ids":[0],'
                f'"steps":3000{extra}}}')

    def deferred(t: float, needed: float, trained: float) -> str:
        return (f'{{"v":2,"kind":"split","task":"worker:0","t":{t},"step":4,"steps":0,'
                f'"deferred_clock":{needed},"clock_seconds":{trained}}}')

    curves = RunCurves()
    lines = [started(1.0), deferred(5.0, 20.0, 3.0), deferred(19.0, 20.0, 18.6)]
    curves.add_events([e for e in (parse_line(x) for x in lines) if e is not None])
    assert curves.split_deferred == {"worker:0": SplitWait(20.0, 18.6)}
    one = wait_text(curves.split_deferred.values(), ended=True)
    assert one.startswith("Not measured: the run was too short: it trained 19 s on the clock "
                          "and needed about 1 s more")
    lines = [started(40.0, 1650), deferred(45.0, 20.0, 4.0), deferred(58.0, 20.0, 17.2)]
    curves.add_events([e for e in (parse_line(x) for x in lines) if e is not None])
    assert curves.split_deferred == {"worker:0": SplitWait(20.0, 17.2, 2, 18.6)}
    ended = wait_text(curves.split_deferred.values(), ended=True)
    assert "too short" not in ended
    assert ended.startswith("Not measured: no stretch of training was long enough (measuring "
                            "starts again when a run resumes and needs about 20 s of training "
                            "in one stretch: the longest trained 19 s;")
    running = wait_text(curves.split_deferred.values(), ended=False)
    assert running.startswith("Not measured yet: measuring starts again when a run resumes, "
                              "once a task has trained about 20 s on the clock since it resumed")


def test_a_profiles_input_share_is_the_marked_calls_time_a_replica_waited_for_data(
        tmp_path: Path) -> None:
    """Read from the trace's events: two replicas waiting side by side count once, a wait
    outside the marked calls not at all; the steps are the calls' first and last; no marked
    call, no share; no trace, or no converter for it, no figure."""
    from dtgui.core.measure.profile_input import INPUT_WAIT, input_share
    from dtgui.launch.trackers.xprof_input import newest_traces, profile_inputs
    from dtgui.worker.profile_request import STEP_MARK

    def event(name: str, ts: float, dur: float, **args: str) -> dict[str, Any]:
        return {"ph": "X", "name": name, "ts": ts, "dur": dur, "args": args}

    events: list[dict[str, Any]] = [event(STEP_MARK, 0, 100, step_num="21", last_step="25"),
              event(STEP_MARK, 150, 100, step_num="26", last_step="30"),
              event(INPUT_WAIT, 10, 30), event(INPUT_WAIT, 20, 30),  # 10-50 once: 40
              event(INPUT_WAIT, 110, 30),  # between the calls: not a step's wait
              event(INPUT_WAIT, 240, 20),  # 10 of it inside the second call
              event("MatMul", 0, 250), {"ph": "M", "name": STEP_MARK}]
    found = input_share("worker:0", events)
    assert found is not None and (found.first, found.last) == (21, 30)
    assert found.share == pytest.approx(50 / 200) and found.seconds == pytest.approx(200e-6)
    assert found.text == "XProf: input 25 % of step time (steps 21-30, worker:0)"
    assert input_share("worker:0", events[2:]) is None
    output = tmp_path / "output"
    assert newest_traces(output) == {} and profile_inputs(output) == []
    for stem, session in (("worker-0", "2026_11_29_07_00_00"), ("worker-0", "2026_11_29_08_00_00"),
                          ("chief-0", "2026_11_29_07_00_00")):
        folder = output / "tensorboard" / stem / "plugins" / "profile" / session
        folder.mkdir(parents=True)
        (folder / "vm.xplane.pb").write_bytes(b"not a trace")
    traces = newest_traces(output)
    assert sorted(traces) == ["chief:0", "worker:0"] and "08_00" in str(traces["worker:0"])
    assert profile_inputs(output) == []  # the converter could not read them: no figure
