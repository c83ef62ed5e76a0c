"""A sweep's life as signals (`dtgui.ui.sweep_session.SweepSession`, from
`dtgui.core.sweeps.sweep_life.changes`): real small sweeps of an own script (no TensorFlow: it prints
its losses), run in the app and in the sweep's own process, each followed to its end."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.run_curves import bundle_curves
from dtgui.core.runs.records import RunRecord
from dtgui.core.runs.run_index import TRIAL, row_of_record
from dtgui.core.runs.run_state import PRUNED_MESSAGE
from dtgui.core.scripts.script import ScriptModel
from dtgui.core.sweeps.sweep import SweepSpec, parse_param
from dtgui.core.sweeps.sweep_life import Change, SweepEvent, SweepLook, changes
from dtgui.core.sweeps.sweep_study import (
    SweepTable,
    TrialRow,
    best_of,
    objective_points,
)
from dtgui.launch.sweeps.sweep_process import LOG_FILE, PID_FILE, sweep_pid
from dtgui.launch.sweeps.sweep_queue import prepare_sweep
from dtgui.ui.sweep_session import SweepSession

PROJECT = Path(__file__).resolve().parent / "script_projects" / "sweep_target"

Said = tuple[str, int, object]  # signal, trial, what it carried


def script_plan(*args: str) -> Plan:
    model = ScriptModel(str(PROJECT), "train.py", args)
    return Plan(run_name="life", strategy=Strategy.ONE_DEVICE, replicas_per_task=1,
                checkpoint_every=0, model=model)


def row(number: int, state: str, last_step: int | None = None,
        objective: float | None = None) -> TrialRow:
    return TrialRow(number, state, {}, objective, None, None, "", "", "", None, None,
                    last_step, None if last_step is None else 1.0 / last_step)


def look(rows: list[TrialRow], running: bool) -> SweepLook:
    spec = SweepSpec(params=(parse_param("lr=choice:0.1,0.2"),))
    return SweepLook(SweepTable(Path("/s"), spec, rows), running)


def test_changes_between_two_looks_are_each_trials_life_in_order() -> None:
    first = look([row(0, "running", 2), row(1, "waiting")], running=True)
    assert changes(None, first) == [SweepEvent(Change.TRIAL_STARTED, 0),
                                    SweepEvent(Change.TRIAL_REPORTED, 0, 2, 0.5)]
    assert changes(first, first) == []  # nothing new: nothing said
    # trial 1 started, reported and was pruned between two looks; trial 0 finished
    second = look([row(0, "finished", 4, objective=0.2), row(1, "pruned", 3, objective=0.9)],
                  running=False)
    assert [(e.change, e.trial) for e in changes(first, second)] == [
        (Change.TRIAL_REPORTED, 0), (Change.TRIAL_ENDED, 0),
        (Change.TRIAL_STARTED, 1), (Change.TRIAL_REPORTED, 1), (Change.TRIAL_PRUNED, 1),
        (Change.TRIAL_ENDED, 1), (Change.SWEEP_ENDED, -1)]
    assert [e.state for e in changes(first, second) if e.change is Change.TRIAL_ENDED] == [
        "finished", "pruned"]
    assert changes(second, second) == []  # the sweep's end is said once
    # a sweep seen first when it is over: every trial's life, then its end
    assert [e.change for e in changes(None, second)][-1] is Change.SWEEP_ENDED


def record(session: SweepSession) -> list[Said]:
    """Every signal of the session's life, in the order it was emitted."""
    said: list[Said] = []
    session.trialStarted.connect(lambda n: said.append(("started", n, None)))
    session.trialReported.connect(
        lambda n, step, value: said.append(("reported", n, (step, value))))
    session.trialPruned.connect(lambda n: said.append(("pruned", n, None)))
    session.trialEnded.connect(lambda n, state: said.append(("ended", n, state)))
    session.sweepEnded.connect(lambda: said.append(("sweep ended", -1, None)))
    return said


def lives(said: list[Said]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for what, trial, _ in said:
        if trial >= 0:
            out.setdefault(trial, []).append(what)
    return out


def test_a_sweep_run_in_the_app_is_said_trial_by_trial_with_its_pruning(
        qtbot: QtBot, tmp_path: Path) -> None:
    """One trial at a time in a set order: two good ones finish, the pruner stops the two far
    worse; each trial is said started, then reported (steps rising), then pruned, then ended,
    and the sweep's end last, once."""
    folder = tmp_path / "here"
    spec = SweepSpec(params=(parse_param("--x=choice:0.3,0.35,3,4"),), trials=4, parallel=1,
                     search="random", pruner="median")
    plan = script_plan("--steps", "40", "--seconds", "0.1")
    study = prepare_sweep(folder, spec, plan)
    for x in ("0.3", "0.35", "3", "4"):
        study.enqueue_trial({"--x": x})
    session = SweepSession()
    said = record(session)
    tables: list[SweepTable] = []
    session.changed.connect(tables.append)
    with qtbot.waitSignal(session.sweepEnded, timeout=120_000):
        session.run_here(folder, spec, plan)
    assert said[-1][0] == "sweep ended" and [s[0] for s in said].count("sweep ended") == 1
    trials = lives(said)
    for n in (0, 1):
        assert trials[n][0] == "started" and trials[n][-1] == "ended", trials[n]
        assert set(trials[n][1:-1]) == {"reported"}, trials[n]
    for n in (2, 3):
        assert trials[n][0] == "started" and trials[n][-2:] == ["pruned", "ended"], trials[n]
        assert set(trials[n][1:-2]) == {"reported"}, trials[n]
    ends = {trial: state for what, trial, state in said if what == "ended"}
    assert ends == {0: "finished", 1: "finished", 2: "pruned", 3: "pruned"}
    for n in range(4):  # reported steps only rise
        steps = [carried[0] for what, trial, carried in said
                 if what == "reported" and trial == n and isinstance(carried, tuple)]
        assert steps == sorted(set(steps)) and steps, (n, steps)
    # one at a time: a trial starts once the one before has ended
    order = [(what, trial) for what, trial, _ in said if what in ("started", "ended")]
    assert order == [(w, n) for n in range(4) for w in ("started", "ended")]
    assert tables and len(tables[-1].rows) == 4 and session.table == tables[-1]
    assert not session.running and not session.following and session.process is None
    # one value a trial everywhere: the sweep's table (CLI, CSV, MLflow read it too) shows
    # the best of its run's curve, a pruned trial's over all its run (it went on past the
    # step its pruner stopped it at, where Optuna's value is), and its run says why it stopped
    for trial in tables[-1].rows:
        curves = bundle_curves(Path(trial.run))
        points = objective_points(spec.objective, {}, curves.scalars.snapshot())
        assert points is not None
        best = best_of(points, spec.goal)
        assert best is not None and (trial.objective, trial.best_step) == best, trial
        kept = RunRecord.load(Path(trial.run))
        if trial.state == "pruned":
            assert trial.last_step is not None and best[1] > trial.last_step, trial
            assert kept.state == "stopped" and kept.message == PRUNED_MESSAGE, kept
            assert row_of_record(kept, TRIAL).state_text == "pruned"  # Runs page, CLI
        else:
            assert kept.state == "finished"


@pytest.mark.gui
def test_a_sweep_in_its_own_process_is_followed_to_its_end_and_again_when_gone_on_with(
        qtbot: QtBot, tmp_path: Path) -> None:
    folder = tmp_path / "away"
    spec = SweepSpec(params=(parse_param("--x=uniform:0:1"),), trials=2, parallel=2,
                     search="random", pruner="none")
    session = SweepSession()
    said = record(session)
    with qtbot.waitSignal(session.started, timeout=30_000) as started:
        session.start(folder, spec, script_plan("--steps", "4", "--seconds", "0.3"))
    pid = started.args[0] if started.args else 0
    assert pid > 0
    qtbot.waitUntil(lambda: session.running, timeout=30_000)
    assert session.process == pid == sweep_pid(folder)
    qtbot.waitUntil(lambda: bool(said) and said[-1][0] == "sweep ended", timeout=120_000)
    log = (folder / LOG_FILE).read_text()
    assert "sweep complete: 2 finished" in log, log
    assert not (folder / PID_FILE).exists() and session.process is None
    trials = lives(said)
    assert sorted(trials) == [0, 1]
    assert all(t[0] == "started" and t[-1] == "ended" and "reported" in t
               for t in trials.values()), trials

    said.clear()  # More trials: the same session follows the process started again
    with qtbot.waitSignal(session.sweepEnded, timeout=120_000):
        session.resume(3)
    assert lives(said) == {2: lives(said)[2]} and lives(said)[2][0] == "started"
    assert lives(said)[2][-1] == "ended" and said[-1][0] == "sweep ended"
    assert "going on with the sweep" in (folder / LOG_FILE).read_text()
