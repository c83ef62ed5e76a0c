"""Resuming an ended run from its checkpoint (dtgui.launch.start.resume): what is refused, with
nothing changed, and the ways in (the dashboard's Resume, RunSession.resume, `dtgui resume`).
The run trains with the stub child (tests/stub_task.py) on this machine; the losses of a
resumed TensorFlow run are compared with an uninterrupted one in tests/test_launch.py, a run
over SSH resumed on its machines and on others in tests/test_multihost.py, a Slurm job ended
by its time limit in tests/test_slurm_run.py."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from fakes import wait_for
from pytestqt.qtbot import QtBot

from dtgui.cli.main import main
from dtgui.core.bundles.bundle import Bundle
from dtgui.core.bundles.checkpoint_files import newest_checkpoint
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.records import RunRecord
from dtgui.core.runs.run_state import RunState
from dtgui.launch.controller import LaunchError
from dtgui.launch.drivers import local_target
from dtgui.launch.runs.history import open_run
from dtgui.launch.start.pipeline import launch_plan
from dtgui.launch.start.resume import restore_refusal, resume_run
from dtgui.ui.pages.dashboard import Dashboard
from dtgui.ui.run_session import RunSession

FOREVER = 1_000_000


def test_a_strategy_or_replica_change_is_refused_unless_the_checkpoint_restores_across_it(
        ) -> None:
    mirrored = Plan(run_name="r", strategy=Strategy.MIRRORED, replicas_per_task=2)
    assert restore_refusal(mirrored, mirrored) == ""
    assert restore_refusal(mirrored, mirrored.with_changes(replicas_per_task=4)) == ""
    mwms = mirrored.with_changes(strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2)
    assert restore_refusal(mirrored, mwms) == ""
    ps = mirrored.with_changes(strategy=Strategy.PARAMETER_SERVER, workers=2, parameter_servers=1)
    assert "Mirrored -> ParameterServer cannot be resumed" in restore_refusal(mirrored, ps)
    assert "replica count" in restore_refusal(ps, ps.with_changes(workers=3))
    record = RunRecord("r-1", "r", "/nowhere", state=RunState.STOPPED)
    record.machines = []
    with pytest.raises(LaunchError, match="never started"):
        resume_run(record)


def test_bad_input_is_refused_with_nothing_changed_then_the_run_resumes_in_the_app_and_cli(
        qtbot: QtBot, stub_python: Callable[..., str],
        capsys: pytest.CaptureFixture[str]) -> None:
    plan = Plan(run_name="resumed", strategy=Strategy.MIRRORED, replicas_per_task=2,
                steps=FOREVER, steps_per_epoch=FOREVER, checkpoint_every=10)
    first = launch_plan(plan, targets=[local_target(stub_python())])
    wait_for(lambda: first.metrics.snapshot().step >= 15, 60, "the run did not step")
    assert first.record is not None
    with pytest.raises(LaunchError, match="still running: stop it first"):
        resume_run(first.record)
    first.request_stop()
    assert first.wait(60) and first.state == "stopped", first.message
    bundle = first.bundle.path
    record = RunRecord.load(bundle)
    saved = record.path.read_bytes()
    checkpoints = bundle / "output" / "checkpoints"
    at = newest_checkpoint(checkpoints).step
    assert at >= 10

    def refused(match: str) -> None:
        with pytest.raises(LaunchError, match=match):
            resume_run(RunRecord.load(bundle), steps=at + 20)
        assert record.path.read_bytes() == saved

    task_script = bundle / "tasks" / "worker-0.sh"
    original = task_script.read_bytes()
    task_script.write_bytes(original + b"# an edit\n")
    refused(r"bundle was edited since it started \(tasks/worker-0.sh in .*Put the files back")
    task_script.write_bytes(original)
    indexes = {p: p.read_bytes() for p in checkpoints.glob("*.index")}
    for index in indexes:  # none whole (a newer one damaged alone is skipped: test_run_faults)
        index.write_bytes(b"not a checkpoint")
    refused(f"no checkpoint in .* is whole .*checkpoint of step {at} was skipped: "
            f"ckpt-{at}.index is damaged.*Start the run anew.*nothing was changed")
    for index, whole in indexes.items():
        index.write_bytes(whole)
    shutil.move(checkpoints, bundle / "kept")
    refused("holds no checkpoint")
    shutil.move(bundle / "kept", checkpoints)

    dashboard = Dashboard()
    qtbot.addWidget(dashboard)
    dashboard.attach(open_run(record))
    button = dashboard.header.resume_button
    assert not button.isHidden() and button.isEnabled()
    with qtbot.waitSignal(dashboard.resumeRequested) as asked:
        button.click()
    assert asked.args == [bundle]

    session = RunSession()
    failed: list[str] = []
    session.failed.connect(failed.append)
    with qtbot.waitSignal(session.started, timeout=60_000):
        session.resume(bundle, steps=at + 20)
    source = session.source
    assert source is not None and failed == []
    qtbot.waitUntil(lambda: source.finished, timeout=60_000)
    assert source.state == "finished", source.message
    steps = [int(x) for x in source.metrics.snapshot().replica_loss[0][0]]
    assert steps == list(range(1, at + 21))

    assert main(["resume", bundle.name, "--steps", str(at + 30)]) == 0
    out = capsys.readouterr().out
    assert f"{at + 30} steps" in out and "run finished" in out
    assert main(["resume", "no-such-run"]) == 2
    assert "no run named 'no-such-run'" in capsys.readouterr().err
    record = RunRecord.load(bundle)
    assert [(s.from_step, str(s.state)) for s in record.segments] == [
        (0, "stopped"), (at, "finished"), (at + 20, "finished")]
    assert Path(record.bundle) == bundle
    assert main(["runs", "show", bundle.name]) == 0  # each stretch of its training
    shown = capsys.readouterr().out
    assert shown.count(" on local, from ") == 3, shown
    assert f"from step {at} to step {at + 20}" in shown
    assert f"from step {at + 20} to step {at + 30}" in shown

    # another replica count: Mirrored's checkpoint restores across it; ParameterServer not
    here, where = [local_target(stub_python())], {"worker:0": "local"}
    saved = record.path.read_bytes()
    with pytest.raises(LaunchError, match="Mirrored -> ParameterServer cannot be resumed"):
        resume_run(record, steps=at + 40, targets=here, assignments=where,
                   changes={"strategy": Strategy.PARAMETER_SERVER})
    assert record.path.read_bytes() == saved
    wider = resume_run(record, steps=at + 40, targets=here, assignments=where,
                       changes={"replicas_per_task": 4})
    assert wider.wait(60) and wider.state == "finished", wider.message
    assert wider.bundle.plan.replicas_per_task == 4 == Bundle.open(bundle).plan.replicas_per_task
    assert sorted(wider.metrics.snapshot().replica_loss) == [0, 1, 2, 3]
