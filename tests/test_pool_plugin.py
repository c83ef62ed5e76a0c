"""A kind of target that is a plugin: tests/plugins/pool, a distribution of its own (its
pyproject's entry point in the group `dtgui.targets`), installed into the test venv by
packaging/dev.sh. No file of dtgui/ names it; it is found as the built-in kinds are, and it
works through the app's own paths: launch from the wizard and from `dtgui run`, stop,
reattach after the app restarts, resume, a sweep's trials, the run queue, clone into the
wizard, export, delete its copies, MLflow's tags, its command-line options and its
Add-machine fields, its probe in the Machines panel. A plugin that fails to load, or lacks a
hook, is reported by name and the others work. The tasks train with the stub child
(tests/stub_task.py), not TensorFlow."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from conftest import ROOT
from fakes import wait_for
from pytestqt.qtbot import QtBot

from dtgui import kinds
from dtgui.cli.main import main
from dtgui.core.bundles.bundle import Bundle
from dtgui.core.bundles.checkpoint_files import newest_checkpoint
from dtgui.core.machines.registry import Machine, MachineRegistry
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.records import RunRecord
from dtgui.core.runs.run_state import RunState
from dtgui.launch.controller import LaunchError, RunController
from dtgui.launch.drivers import DRIVERS, plugin_problems, target_of_record
from dtgui.launch.run_admin import delete_run, source_plan, write_export
from dtgui.launch.runs.policy import RunPolicy
from dtgui.launch.start.pipeline import reattach
from dtgui.launch.start.resume import resume_run
from dtgui.launch.trackers.mlflow_runs import artifacts, run_tags

dtgui_pool = pytest.importorskip("dtgui_pool", reason="the test plugin is installed by "
                                 "packaging/dev.sh (pip install -e tests/plugins/pool)")
from dtgui_pool.driver import PoolDriver, PoolExecutor, pool_target  # noqa: E402
from dtgui_pool.job import PoolJob, PoolSettings  # noqa: E402

FOREVER = 1_000_000
POOL = "p1"


@pytest.fixture
def pool(tmp_path: Path, stub_python: Callable[..., str]) -> Machine:
    """A registered pool whose tasks train with the stub child."""
    machine = Machine(POOL, "", kind="pool", settings=PoolSettings(str(tmp_path / "pool")),
                      python=stub_python())
    MachineRegistry().add(machine)
    return machine


def plan_of(steps: int, name: str = "pooled") -> Plan:
    return Plan(run_name=name, strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                replicas_per_task=1, steps=steps, steps_per_epoch=min(steps, 100),
                checkpoint_every=10)


def test_the_plugin_is_found_as_the_built_in_kinds_are_and_dtgui_never_names_it() -> None:
    from dtgui.cli.kind_options import kind_options
    from dtgui.ui.wizard.target_boxes import BOXES

    assert isinstance(DRIVERS["pool"], PoolDriver) and set(DRIVERS) >= {"local", "ssh",
                                                                        "slurm", "pool"}
    assert BOXES["pool"].__module__ == "dtgui_pool.box"
    assert "pool" in kinds.hooks("fields")
    assert [o.kind for o in kind_options() if o.kind == "pool"] == ["pool"]
    assert plugin_problems() == []
    named = [p for p in (ROOT / "dtgui").rglob("*.py")
             if re.search(r"dtgui_pool|Pool(Driver|Job|Box|Fields|Options|Settings)|--pool\b",
                          p.read_text(encoding="utf-8"))]
    assert named == []


def test_dtgui_export_and_run_with_its_options_then_mlflow_tags_and_delete_its_copy(
        pool: Machine, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bundle"
    assert main(["export", str(out), "--strategy", "multi_worker_mirrored", "--workers", "2",
                 "--steps", "3", "--steps-per-epoch", "3", "--checkpoint-every", "0",
                 "--pool", POOL]) == 0, capsys.readouterr().err
    assert f"for the pool {POOL}" in capsys.readouterr().out
    assert PoolJob.load(out) == PoolJob(POOL)
    # its part of the task program is beside the worker package, run from the bundle
    told = subprocess.run([sys.executable, "-m", "dtgui_pool_task"], cwd=out,
                          capture_output=True, text=True, timeout=60)
    assert told.stdout.strip() == POOL
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        assert main(["run", str(out)]) == 0, capsys.readouterr().err
    finally:
        signal.signal(signal.SIGINT, handlers[0])
        signal.signal(signal.SIGTERM, handlers[1])
    assert f"in the pool {POOL}" in capsys.readouterr().out  # the driver's started line
    record = RunRecord.load(out)
    assert record.state is RunState.FINISHED, record.message
    (rec,) = record.machines
    assert (rec.name, rec.kind) == (POOL, "pool")
    copy = Path(rec.dir)
    assert copy.parent == tmp_path / "pool" and (copy / "tasks").is_dir()
    # the tasks ran in the pool's copy; their files were mirrored into the run's own folder
    assert Bundle.open(out).events_file(Bundle.open(out).plan.tasks[0]).stat().st_size > 0
    tags = run_tags(Bundle.open(out), record)
    assert tags["dtgui.target"] == "pool" and tags["dtgui.pool"] == POOL
    assert out / "pool.json" in artifacts(Bundle.open(out), record)
    deleted = delete_run(out, remote=True)
    assert deleted.removed == [f"{POOL}:{copy}"] and not copy.exists() and not out.exists()
    # an unknown pool: refused by its options, with its own error's words
    assert main(["export", str(tmp_path / "x"), "--strategy", "multi_worker_mirrored",
                 "--pool", "nowhere"]) == 2
    assert "no pool is registered as 'nowhere'" in capsys.readouterr().err


def test_launched_from_the_wizard_stopped_reattached_after_a_restart_resumed_and_cloned(
        qtbot: QtBot, pool: Machine, tmp_path: Path) -> None:
    from dtgui.ui.run_session import RunSession
    from dtgui.ui.wizard import RunWizard

    wizard = RunWizard(None, plan_of(FOREVER, "wizard"))
    qtbot.addWidget(wizard)
    wizard.set_machines(MachineRegistry().machines())
    wizard.show()
    for _ in range(3):
        wizard.next()
    review = wizard.review_page
    box = review.machines_box
    radio = box.radios["pool"]
    assert radio.isEnabled()
    radio.setChecked(True)
    assert review.job == PoolJob(POOL) and review.isComplete()
    from dtgui.ui.machines.panel import MachinesPanel

    panel = MachinesPanel(registry=MachineRegistry())
    qtbot.addWidget(panel)
    qtbot.waitUntil(lambda: panel.registry is not None, timeout=10_000)
    session = RunSession(lambda: panel)
    failed: list[str] = []
    session.failed.connect(failed.append)
    with qtbot.waitSignals([session.started], timeout=60_000, raising=False):
        session.launch(wizard.plan(), tmp_path / "runs", RunPolicy(), review.job)
    assert failed == []
    source = session.source
    assert isinstance(source, RunController)
    wait_for(lambda: source.metrics.snapshot().step >= 15, 60, "the run did not step")
    bundle = source.bundle.path
    record = RunRecord.load(bundle)
    assert [(m.name, m.kind) for m in record.machines] == [(POOL, "pool")]
    # the app closes while the run trains; a new one reattaches through the pool's driver
    source.detach()
    again = reattach(RunRecord.load(bundle))
    assert isinstance(again.executors[0], PoolExecutor)
    wait_for(lambda: again.metrics.snapshot().step >= 25, 60, "the reattached run did not step")
    again.request_stop()
    assert again.wait(60) and again.state is RunState.STOPPED, again.message
    # resumed in its pool, from its checkpoint; moving it is refused in the kind's words
    ended = RunRecord.load(bundle)
    copy = Path(ended.machines[0].dir)  # the checkpoints are in the pool's copy
    at = newest_checkpoint(copy / "output" / "checkpoints").step
    assert at >= 10
    with pytest.raises(LaunchError, match="a run in a pool resumes in its pool"):
        resume_run(ended, steps=at + 10, targets=[target_of_record(ended.machines[0]),
                                             pool_target(pool, PoolJob(POOL, "x"))],
                   assignments={"worker:0": POOL, "worker:1": POOL})
    resumed = resume_run(RunRecord.load(bundle), steps=at + 10)
    assert resumed.wait(60) and resumed.state is RunState.FINISHED, resumed.message
    # clone into the wizard: the pool's job read from the bundle refills its box
    plan, job = source_plan(bundle)
    assert job == PoolJob(POOL)
    clone = RunWizard(None, plan)
    qtbot.addWidget(clone)
    clone.set_machines(MachineRegistry().machines())
    clone.load_plan(plan, job)
    assert clone.review_page.machines_box.boxes["pool"].refilled == PoolJob(POOL)  # type: ignore[attr-defined]
    # export of the clone as the pool's job: its driver writes it
    path, how = write_export(plan, tmp_path / "exported", job)
    assert PoolJob.load(path) == PoolJob(POOL) and "bash run.sh" in how
    assert (path / "dtgui_pool_task.py").is_file()


def test_a_sweeps_trials_are_jobs_in_the_pool(pool: Machine, tmp_path: Path) -> None:
    import dataclasses
    import io

    from dtgui.core.sweeps.sweep import SweepSpec, load_sweep, parse_param
    from dtgui.launch.drivers import job_readers, trial_job
    from dtgui.launch.sweeps.sweep_process import run_sweep
    from dtgui.launch.sweeps.sweep_queue import prepare_sweep

    job = trial_job(plan_of(3), pool)
    assert job == PoolJob(POOL)
    spec = dataclasses.replace(SweepSpec(params=(parse_param("lr=loguniform:1e-3:1e-1"),),
                                         trials=2, parallel=1, search="random",
                                         objective="loss", pruner="none"), job=job)
    folder = tmp_path / "sweep"
    plan = plan_of(5, "swept").with_changes(checkpoint_every=0)
    prepare_sweep(folder, spec, plan)
    assert load_sweep(folder, job_readers())[0].job == PoolJob(POOL)
    out, err = io.StringIO(), io.StringIO()
    assert run_sweep(folder, spec, plan, out, err) == 0, out.getvalue() + err.getvalue()
    records = [RunRecord.load(p.parent) for p in folder.rglob("run.json")]
    assert len(records) == 2
    assert all([(m.name, m.kind) for m in r.machines] == [(POOL, "pool")] and
               r.state is RunState.FINISHED for r in records)


def test_the_run_queue_starts_a_run_in_the_pool(pool: Machine, tmp_path: Path) -> None:
    from dtgui.core.runs.records import RunHistory
    from dtgui.launch.queue.run_queue import QUEUE_PROCESS, enqueue, queue_dir
    from dtgui.launch.start.watcher import stop_watcher

    plan = plan_of(FOREVER, "queued")
    try:
        enqueue(plan, job=PoolJob(POOL))
        wait_for(lambda: any(r.run_name == "queued" for r in RunHistory().running()), 120,
                 "the queue did not start the run")
        record = next(r for r in RunHistory().running() if r.run_name == "queued")
        assert [(m.name, m.kind) for m in record.machines] == [(POOL, "pool")]
    finally:
        QUEUE_PROCESS.stop(queue_dir())
        for running in RunHistory().running():
            if stop_watcher(running):
                controller = reattach(RunRecord.load(Path(running.bundle)))
                controller.request_stop()
                controller.wait(60)


def test_its_add_machine_fields_and_its_probe_in_the_machines_panel(
        qtbot: QtBot, tmp_path: Path) -> None:
    from dtgui.ui.machines.add_dialog import MachineDialog
    from dtgui.ui.machines.panel import MachinesPanel

    registry = MachineRegistry(tmp_path / "machines.toml")
    dialog = MachineDialog(registry, None)
    qtbot.addWidget(dialog)
    fields = dialog.kind_fields["pool"]
    dialog.name_edit.setText("p2")
    fields.setChecked(True)
    assert not dialog.ok_button.isEnabled()  # a pool needs its folder
    fields.folder_edit.setText(str(tmp_path / "p2"))  # type: ignore[attr-defined]
    machine = dialog.machine()
    assert (machine.kind, machine.settings) == ("pool", PoolSettings(str(tmp_path / "p2")))
    assert dialog.ok_button.isEnabled()  # no host: a pool is not reached over SSH
    dialog.kind_fields["slurm"].setChecked(True)  # a machine is of one kind
    assert not fields.isChecked()
    registry.add(machine)
    (tmp_path / "p2" / "run-a").mkdir(parents=True)
    # machines.toml keeps the kind and its table; it loads back the same
    assert MachineRegistry(tmp_path / "machines.toml").get("p2") == machine
    panel = MachinesPanel(registry=registry)
    qtbot.addWidget(panel)
    qtbot.waitUntil(lambda: panel.registry is not None, timeout=10_000)
    panel.refresh(["p2"])
    qtbot.waitUntil(lambda: panel.states["p2"].status == "ok", timeout=30_000)
    facts = panel.states["p2"].facts
    assert facts is not None and facts.kind_facts is not None
    assert facts.kind_facts.gpus_cell() == "1 run(s)"
    assert panel.kind_facts()["p2"] is facts.kind_facts


@pytest.fixture
def extra_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[EntryPoint]]:
    """Entry points added to those installed, the registry loaded again with them."""
    added: list[EntryPoint] = []
    real = kinds._entry_points
    monkeypatch.setattr(kinds, "_entry_points", lambda: [*real(), *added])
    monkeypatch.setattr(kinds, "_kinds", None)
    monkeypatch.setattr(kinds, "_problems", [])
    monkeypatch.setattr(DRIVERS, "loaded", False)
    monkeypatch.setattr(DRIVERS, "found", {})
    yield added


def test_a_plugin_that_fails_to_load_or_lacks_a_hook_is_named_and_the_others_work(
        extra_plugins: list[EntryPoint], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    package = tmp_path / "plugins"
    package.mkdir()
    (package / "broken_kind.py").write_text("raise ImportError('no such library')\n")
    (package / "hookless_kind.py").write_text(
        "from dtgui.kinds import Kind\n"
        "from dtgui.launch.drivers.base import Driver\n"
        "class HalfDriver(Driver):\n    kind = 'half'\n"
        "TARGET_KIND = Kind(name='half', driver='hookless_kind:HalfDriver')\n"
        "NO_DRIVER = Kind(name='bare', driver='')\n")
    sys.path.insert(0, str(package))
    try:
        extra_plugins += [EntryPoint("broken", "broken_kind:TARGET_KIND", kinds.GROUP),
                          EntryPoint("half", "hookless_kind:TARGET_KIND", kinds.GROUP),
                          EntryPoint("bare", "hookless_kind:NO_DRIVER", kinds.GROUP)]
        problems = plugin_problems()
        assert len(problems) == 3
        assert "'bare'" in problems[0] and "lacks the hook 'driver'" in problems[0]
        assert "'broken'" in problems[1] and "no such library" in problems[1]
        assert "'half'" in problems[2] and "lacks the hook 'place', 'executor', " \
            "'reattach'" in problems[2]
        assert {"local", "ssh", "slurm", "pool"} <= set(DRIVERS) and "half" not in DRIVERS
        # the command line says each on stderr, and goes on
        assert main(["runs", "list"]) == 0
        err = capsys.readouterr().err
        assert all(f"dtgui: {p}" in err for p in problems)
    finally:
        sys.path.remove(str(package))
