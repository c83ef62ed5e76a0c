"""Sweeps without TensorFlow: the parameters and their spaces, what a trial's plan is, the
checks against the run setup, the study's storage, and the queue's handling of a failing
trial (tasks run the stub child under the real supervisor)."""

from __future__ import annotations

import csv
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fakes import wait_for

from dtgui.cli.main import main
from dtgui.core.plans.plan import DeviceKind, Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.scripts.script import ScriptModel
from dtgui.core.sweeps.sweep import (
    ParamTarget,
    SpaceKind,
    SweepError,
    SweepSpec,
    apply,
    check,
    load_sweep,
    parse_param,
)
from dtgui.core.sweeps.sweep_study import (
    STUDY_FILE,
    TRIALS_CSV,
    best_of,
    objective_points,
    open_study,
)
from dtgui.launch.gpus.free_slots import Slot
from dtgui.launch.start.pipeline import launch_plan
from dtgui.launch.sweeps.sweep_queue import SweepQueue
from dtgui.launch.targets import Target


def test_a_param_names_where_it_goes_and_its_values_are_typed() -> None:
    lr = parse_param("lr=loguniform:1e-4:1e-1")
    assert (lr.target, lr.key, lr.kind, lr.space.kind) == (
        ParamTarget.PLAN, "learning_rate", "float", SpaceKind.LOGUNIFORM)
    assert (lr.space.low, lr.space.high) == (1e-4, 1e-1)
    batch = parse_param("batch-size=choice:16,32,64")
    assert batch.key == "per_replica_batch" and batch.space.values == (16, 32, 64)
    assert parse_param("optimizer=choice:adam,sgd").space.values == ("adam", "sgd")
    assert parse_param("warm-up=int:0:20").space.grid() == list(range(21))
    assert parse_param("DTGUI_LEARNING_RATE=uniform:0.01:0.1").key == "learning_rate"
    dropout = parse_param("env:DROPOUT=uniform:0:0.5")
    assert (dropout.target, dropout.key) == (ParamTarget.ENV, "DROPOUT")
    depth = parse_param("--depth=choice:2,4")
    assert (depth.target, depth.key, depth.space.values) == (ParamTarget.ARG, "--depth",
                                                              ("2", "4"))


@pytest.mark.parametrize(("text", "says"), [
    ("lr=loguniform:1e-1:1e-4", "inverted"),
    ("lr=uniform:0.1:0.1", "empty"),
    ("lr=loguniform:0:0.1", "above 0"),
    ("lr=choice:", "empty"),
    ("batch-size=uniform:16:64", "whole number"),
    ("batch-size=choice:16,32.5", "not a whole number"),
    ("optimizer=uniform:0:1", "takes names"),
    ("lr=gaussian:0:1", "unknown space"),
    ("lr=uniform:a:1", "not a number"),
    ("colour=choice:red,blue", "not a parameter dtgui can vary"),
    ("lr", "NAME=SPACE"),
    ("DTGUI_TASK=choice:1,2", "dtgui sets this variable itself"),
    ("env:DTGUI_X=choice:1,2", "dtgui sets this variable itself"),
])
def test_bad_spaces_are_refused_with_the_reason(text: str, says: str) -> None:
    with pytest.raises(SweepError, match=says):
        parse_param(text)


def test_a_trial_plan_carries_its_values_and_the_script_gets_its_own() -> None:
    plan = Plan()
    params = (parse_param("lr=loguniform:1e-4:1e-1"), parse_param("batch-size=choice:16,32"))
    trial = apply(plan, {"lr": 0.01, "batch-size": 16}, params)
    assert (trial.learning_rate, trial.per_replica_batch) == (0.01, 16)

    script = ScriptModel(project="/p", entry="train.py", args=("--depth", "3", "--width=8"))
    sp = plan.with_changes(model=script)
    script_params = (parse_param("--depth=choice:2,4"), parse_param("--width=choice:16,32"),
                     parse_param("--drop=choice:0.1,0.2"), parse_param("env:X=choice:1,2"))
    got = apply(sp, {"--depth": "4", "--width": "16", "--drop": "0.2", "env:X": "2"},
                script_params).script
    assert got is not None
    assert got.args == ("--depth", "4", "--width=16", "--drop", "0.2")
    assert got.env == {"X": "2"}


def test_a_grid_trains_every_value_unless_the_user_chose_a_pruner() -> None:
    """A grid lists every value to be seen trained to the end: no pruner unless asked; a
    search prunes by the median (on the command line as in the sweep dialog)."""
    import argparse

    import optuna

    from dtgui.cli.sweep import _spec
    from dtgui.core.sweeps.sweep_study import pruner

    def spec_of(*argv: str) -> SweepSpec:
        args = argparse.Namespace(param=["lr=choice:0.01,0.1"], trials=None, parallel=None,
                                  search=None, objective=None, direction=None, pruner=None,
                                  storage=None, search_seed=None, trial_on="")
        for pair in argv:
            key, _, value = pair.partition("=")
            setattr(args, key, value)
        return _spec(args)

    assert spec_of("search=grid").pruner == "none"
    assert isinstance(pruner(spec_of("search=grid")), optuna.pruners.NopPruner)
    assert spec_of("search=grid", "pruner=median").pruner == "median"
    assert spec_of().pruner == "median" and spec_of("search=random").pruner == "median"


def test_check_says_what_the_model_cannot_take() -> None:
    demo = Plan()
    spec = SweepSpec(params=(parse_param("--depth=choice:2,4"),
                             parse_param("optimizer=choice:adam,lion"),
                             parse_param("lr=uniform:0.1:20")))
    problems = " ".join(check(spec, demo))
    assert "--depth: only your own training script takes arguments" in problems
    assert "optimizer=lion" in problems
    assert "lr=20" in problems
    script = demo.with_changes(model=ScriptModel("/p", "t.py"))
    problems = " ".join(check(SweepSpec(params=(parse_param("optimizer=choice:adam,sgd"),)),
                              script))
    assert "your script is not told this setting" in problems
    grid = SweepSpec(params=(parse_param("lr=uniform:0.1:0.2"),), search="grid")
    assert "grid search needs a list" in " ".join(check(grid, demo))
    assert check(SweepSpec(params=(parse_param("lr=choice:0.1,0.2"),), search="grid"),
                 demo) == []


def test_a_sweeps_trial_job_and_machines_are_typed_and_old_sweep_json_still_read(
        tmp_path: Path) -> None:
    """sweep.json keeps the job each trial is as {"kind": ..., **its fields} and the
    --trial-on machines as fields of their own; the job is read back by its kind's driver
    (the readers the launch layer passes). One written when the job was a Slurm job under
    "slurm" (at the top level, or with the machines in "extra") reads the same."""
    import json

    from dtgui.core.sweeps.sweep import StoredJob, save_sweep
    from dtgui.kinds.slurm.job import SlurmJob
    from dtgui.launch.drivers import job_readers

    job = SlurmJob(cluster="hpc", nodes=2, partition="gpu", setup=("module load cuda",))
    spec = SweepSpec(params=(parse_param("lr=choice:0.1,0.2"),), job=job)
    save_sweep(tmp_path / "new", spec, Plan())
    data = json.loads((tmp_path / "new" / "sweep.json").read_text())
    assert data["spec"]["job"]["kind"] == "slurm" and data["spec"]["job"]["partition"] == "gpu"
    assert "extra" not in data["spec"] and "slurm" not in data["spec"]
    read = load_sweep(tmp_path / "new", job_readers())[0]
    assert read == spec and isinstance(read.job, SlurmJob)
    # without the readers (what only shows or exports a sweep) the job is kept as stored
    stored = load_sweep(tmp_path / "new")[0]
    assert stored.job == StoredJob("slurm", job.to_dict())
    save_sweep(tmp_path / "again", stored, Plan())
    assert load_sweep(tmp_path / "again", job_readers())[0] == spec
    old = tmp_path / "old"
    old.mkdir()
    fields = {k: v for k, v in data["spec"].pop("job").items() if k != "kind"}
    data["spec"]["slurm"] = fields  # an older dtgui's top-level key
    (old / "sweep.json").write_text(json.dumps(data))
    assert load_sweep(old, job_readers())[0] == spec
    data["spec"]["extra"] = {"slurm": data["spec"].pop("slurm"),
                             "trial_on": data["spec"].pop("trial_on")}
    (old / "sweep.json").write_text(json.dumps(data))
    assert load_sweep(old, job_readers())[0] == spec
    data["spec"]["extra"] = {"trial_on": ["local", "gpu1"]}
    (old / "sweep.json").write_text(json.dumps(data))
    read = load_sweep(old, job_readers())[0]
    assert read.trial_on == ("local", "gpu1") and read.job is None
    data["spec"]["extra"] = {"slurm": {"cluster": "hpc", "nodes": "many"}}
    (old / "sweep.json").write_text(json.dumps(data))
    with pytest.raises(SweepError, match="trial job cannot be read"):
        load_sweep(old, job_readers())
    data["spec"]["job"] = {"kind": "ssh", "host": "h"}  # a kind whose trials are not jobs
    (old / "sweep.json").write_text(json.dumps(data))
    with pytest.raises(SweepError, match="take no sweep's trials as jobs"):
        load_sweep(old, job_readers())


def test_the_objective_is_read_from_validation_or_a_scalar() -> None:
    np = pytest.importorskip("numpy")
    validation = {"loss": (np.array([4, 8]), np.array([2.0, 1.5])),
                  "accuracy": (np.array([4, 8]), np.array([0.5, 0.4]))}
    scalars = {"val/f1": {"worker:1": (np.array([1]), np.array([0.2])),
                          "worker:0": (np.array([1, 2]), np.array([0.3, 0.6]))}}
    points = objective_points("val_loss", validation, scalars)
    assert points is not None and best_of(points, "minimize") == (1.5, 8)
    points = objective_points("val_accuracy", validation, scalars)
    assert points is not None and best_of(points, "maximize") == (0.5, 4)
    points = objective_points("val_f1", validation, scalars)  # the main task's scalar
    assert points is not None and best_of(points, "maximize") == (0.6, 2)
    assert objective_points("val_auc", validation, scalars) is None
    assert SweepSpec(params=(), objective="val_accuracy").goal == "maximize"
    assert SweepSpec(params=(), objective="val_loss").goal == "minimize"


def test_bad_input_on_the_command_line_is_a_clear_error_without_tensorflow(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", str(out), "--param", "lr=loguniform:1e-1:1e-4"]) == 2
    assert "lr: the range 0.1..0.0001 is inverted" in capsys.readouterr().err
    assert main(["sweep", str(out), "--param", "lr=loguniform:1e-4:1e-1",
                 "--storage", "sqlite:////nonexistent/dir/study.db"]) == 2
    err = capsys.readouterr().err
    assert "The study storage sqlite:////nonexistent/dir/study.db cannot be reached" in err
    assert main(["sweep", str(out), "--param", "lr=loguniform:1e-4:1e-1", "--storage",
                 "postgresql://me:secret@127.0.0.1:1/db"]) == 2
    err = capsys.readouterr().err
    assert "cannot be reached" in err and "secret" not in err
    assert main(["sweep", str(out), "--param", "env:X=choice:1,2"]) == 2
    assert "the demo model cannot take it" in capsys.readouterr().err
    # a script's argument in the name form docs/sweeps.md gives reaches the sweep's checks
    assert main(["sweep", str(out), "--param", "--dropout=uniform:0.1:0.5"]) == 2
    assert "the demo model cannot take it" in capsys.readouterr().err
    assert not (out / "sweep.json").exists()
    assert "tensorflow" not in sys.modules


def test_a_failing_trial_is_marked_failed_and_the_others_go_on(
        tmp_path: Path, stub_python: Callable[..., str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two slots; trial 1's tasks fail. Every trial ends, the study holds them all (the
    objective is the final training loss: the stub child reports no validation). Slot b's
    GPU is taken by another process when first asked: said, and the slot waits."""
    from dtgui.launch.sweeps import sweep_queue

    monkeypatch.setattr(sweep_queue, "RECHECK_SECONDS", 0.2)
    asked: list[str] = []

    def busy(slot: Slot) -> str:
        asked.append(slot.name)
        return "GPU 0 is in use" if slot.name == "b" and asked.count("b") < 3 else ""

    good, bad = stub_python(), stub_python(fail="worker:0=the data ran out")
    plan = Plan(run_name="stub", strategy=Strategy.ONE_DEVICE, replicas_per_task=1, steps=6,
                checkpoint_every=0)

    def launch(trial_plan: Plan, root: Path, **kwargs: Any) -> Any:
        python = bad if trial_plan.run_name.endswith("t001") else good
        return launch_plan(trial_plan, root, **{**kwargs, "targets": [Target(python=python)]})

    spec = SweepSpec(params=(parse_param("lr=loguniform:1e-4:1e-1"),), trials=4, parallel=2,
                     search="random", objective="loss", pruner="none")
    ended: list[str] = []
    said: list[str] = []
    queue = SweepQueue.new(tmp_path / "s", spec, plan, slots=[Slot("a"), Slot("b")],
                           launch=launch, on_trial_end=lambda row: ended.append(row.state),
                           busy=busy, on_note=said.append)
    rows = {r.number: r for r in queue.run()}
    assert sorted(ended) == ["failed", "finished", "finished", "finished"]
    assert rows[1].state == "failed" and "the data ran out" in rows[1].error, rows[1]
    assert rows[1].objective is None  # a failed trial has no value anywhere
    assert all(rows[n].objective is not None for n in (0, 2, 3))
    assert asked.count("b") >= 3 and said[0].startswith("b: GPU 0 is in use; the next trial")
    assert said[1] == "b is free again: a trial starts there." and len(said) == 2  # said once
    assert queue.study.user_attrs["notes"] == said
    with (tmp_path / "s" / TRIALS_CSV).open() as f:
        assert [r["state"] for r in csv.DictReader(f)].count("finished") == 3
    # the sweep folder holds its state: opened again with more trials, it adds them
    spec2, plan2 = load_sweep(tmp_path / "s")
    assert spec2 == spec and plan2 == plan
    more = SweepQueue.new(tmp_path / "s", SweepSpec(**{**spec.__dict__, "trials": 5}), plan,
                          slots=[Slot("a")], launch=launch)
    assert len(more.run()) == 5
    assert len(open_study(spec, tmp_path / "s").trials) == 5
    assert (tmp_path / "s" / STUDY_FILE).is_file()

    # exported as a folder of bundles plus rerun.py, which reruns a trial without dtgui
    out = tmp_path / "exported"
    assert main(["sweep", str(tmp_path / "s"), "--export", str(out)]) == 0
    assert sorted(p.name for p in out.glob("t*")) == [f"t{n:03d}" for n in range(5)]
    assert main(["sweep", str(tmp_path / "s"), "--export", str(out)]) == 2  # not empty
    best = next(r for r in sorted(rows.values(), key=lambda r: r.objective or 9e9))
    rerun = subprocess.run([sys.executable, str(out / "rerun.py"), "--only", str(best.number),
                            "--python", good], capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"trial {best.number}: lr={best.params['lr']}: loss " in rerun.stdout, rerun.stdout
    with (out / "rerun.csv").open() as f:
        assert [r["number"] for r in csv.DictReader(f)] == [str(best.number)]


def test_a_sweep_opened_again_settles_and_follows_the_trials_dtgui_left_running(
        tmp_path: Path, stub_python: Callable[..., str]) -> None:
    """dtgui stopped mid-sweep: one trial's run ended while it was away, one still runs,
    one never started. Opened again, the queue settles the first from its bundle, follows
    the second to its end, marks the third failed, and runs the trial still owed."""
    python = stub_python(step_seconds=0.3)
    plan = Plan(run_name="back", strategy=Strategy.ONE_DEVICE, replicas_per_task=1, steps=8,
                checkpoint_every=0)
    spec = SweepSpec(params=(parse_param("lr=choice:0.01,0.02,0.03,0.04"),), trials=4,
                     parallel=2, search="random", objective="loss", pruner="none")
    folder = tmp_path / "s"
    queue = SweepQueue.new(folder, spec, plan, slots=[Slot("a", (Target(python=python),))])
    study = queue.study
    runs = []
    for n in range(2):  # what the queue had started before dtgui stopped
        trial = study.ask()
        trial.suggest_categorical("lr", [0.01, 0.02, 0.03, 0.04])
        controller = launch_plan(plan.with_changes(run_name=f"back-t{n:03d}",
                                                   steps=2 if n == 0 else 30),
                                 queue.trials_root, targets=[Target(python=python)])
        trial.set_user_attr("bundle", str(controller.bundle.path))
        trial.set_user_attr("started", 1.0)
        runs.append(controller)
    assert runs[0].wait(60) and runs[0].state == "finished", runs[0].message
    runs[1].detach()  # dtgui went away; its tasks go on
    assert not runs[1].finished or runs[1].state == "detached"
    study.ask().suggest_categorical("lr", [0.01, 0.02, 0.03, 0.04])  # never launched

    again = SweepQueue.new(folder, spec, plan, slots=[Slot("a", (Target(python=python),)),
                                                      Slot("b", (Target(python=python),))])
    rows = {r.number: r for r in again.run()}
    assert [rows[n].state for n in range(4)] == ["finished", "finished", "failed", "finished"]
    assert "before its run started" in rows[2].error
    assert rows[1].objective is not None and rows[1].seconds is not None
    assert rows[1].machine in ("a", "b")  # followed again on a slot


def test_a_stopped_sweep_continued_runs_its_stopped_trials_again_first(
        tmp_path: Path, stub_python: Callable[..., str]) -> None:
    """Stop sweep while both trials run: they end stopped, each with the checkpoint
    of the step it reached. Continued, the queue runs each again with its values (new
    trials) before it asks the sampler for new ones, and ends with as many finished trials
    as asked; once only. Trial 0's run goes on from its checkpoint in its own run folder
    (its curve continues after the checkpoint's step), on its new slot's GPU; trial 1's
    checkpoint is gone: its values train from step 0 in a new run folder."""
    import shutil
    import threading

    from dtgui.core.bundles.bundle import Bundle
    from dtgui.core.bundles.checkpoint_files import CHECKPOINTS_DIR, newest_checkpoint
    from dtgui.core.events import read_all
    from dtgui.core.runs.records import RunRecord
    from dtgui.core.sweeps.sweep_study import RERUN_ATTR, RESUMED_ATTR, rows

    plan = Plan(run_name="halt", strategy=Strategy.ONE_DEVICE, replicas_per_task=1, steps=50,
                checkpoint_every=0, device_kind=DeviceKind.GPU)  # the stub uses none
    spec = SweepSpec(params=(parse_param("lr=loguniform:1e-4:1e-1"),), trials=2, parallel=2,
                     search="random", objective="loss", pruner="none")
    folder = tmp_path / "s"

    def slots(python: str, first_gpu: int) -> list[Slot]:  # one GPU each (none probed)
        return [Slot(name, (Target(python=python, gpus=(first_gpu + i,)),))
                for i, name in enumerate("ab")]

    slow = SweepQueue.new(folder, spec, plan, slots=slots(stub_python(step_seconds=0.2), 0),
                          busy=lambda slot: "")
    thread = threading.Thread(target=slow.run)
    thread.start()
    wait_for(lambda: len(slow._running) == 2 and all(
        r.controller.metrics.snapshot().step >= 5 for r in list(slow._running.values())), 60,
        "the two trials did not step")
    slow.request_stop()  # Stop sweep (the sweep's process does this on SIGTERM and Ctrl-C)
    thread.join(60)
    stopped = slow.study.get_trials()
    assert [(t.state.name, t.user_attrs["error"]) for t in stopped] == [("FAIL", "stopped")] * 2
    kept = Bundle.open(Path(stopped[0].user_attrs["bundle"]))
    saved = newest_checkpoint(kept.output / CHECKPOINTS_DIR).step
    assert 5 <= saved < 50
    shutil.rmtree(Path(stopped[1].user_attrs["bundle"]) / "output" / CHECKPOINTS_DIR)

    said: list[str] = []
    again = SweepQueue(folder, *load_sweep(folder), slots=slots(stub_python(), 2),
                       busy=lambda slot: "", on_note=said.append)
    done = again.run()
    assert [r.state for r in done] == ["stopped", "stopped", "finished", "finished"], done
    assert [r.continued_in for r in done] == [2, None, None, None]
    reruns = again.study.get_trials()[2:]
    assert [t.user_attrs[RERUN_ATTR] for t in reruns] == [0, 1]
    assert [t.params for t in reruns] == [t.params for t in stopped]
    assert said[0].startswith("trial 0 was stopped: it runs again with its values (lr=")
    # trial 2 continued trial 0's run: its folder, from the checkpoint's step on
    assert reruns[0].user_attrs["bundle"] == str(kept.path)
    assert reruns[0].user_attrs[RESUMED_ATTR] == saved
    assert f"trial 2 continues trial 0's run from its checkpoint of step {saved}." in said
    assert [t.gpus for t in Bundle.open(kept.path).plan.tasks] == [(2,)]  # its slot's GPU
    segments = RunRecord.load(kept.path).segments
    assert [s.from_step for s in segments] == [0, saved] and segments[-1].steps == 50
    events = read_all(kept.events_file(kept.plan.tasks[0]))
    last_start = max(i for i, e in enumerate(events) if e.kind == "started")
    firsts = [e.get("first") for e in events[last_start:] if e.kind == "steps"]
    assert firsts[0] == saved + 1 and events[last_start].get("resumed_from_step") == saved
    # trial 3: no checkpoint, from step 0 in a run folder of its own
    assert RESUMED_ATTR not in reruns[1].user_attrs
    assert reruns[1].user_attrs["bundle"] != stopped[1].user_attrs["bundle"]
    assert any(n.startswith("trial 3 runs trial 1's values from step 0: Not resumed") for n in said)
    assert "its run continues in trial 2" in rows(again.study)[0].text("loss")
    assert len(SweepQueue(folder, *load_sweep(folder), slots=[Slot("a")]).run()) == 4


def test_gpu_trials_take_idle_gpus_only_and_say_when_fewer_than_asked() -> None:
    from dtgui.core.machines.hardware import GpuInfo
    from dtgui.launch.gpus.free_slots import gpu_slots, idle, slots_for

    gib = 1 << 30
    gpus = [GpuInfo(0, "A", 16 * gib, 300 << 20, 0.0), GpuInfo(1, "A", 16 * gib, 12 * gib, 5.0),
            GpuInfo(2, "A", 16 * gib, 0, 95.0), GpuInfo(3, "A", 16 * gib, 0, 0.0)]
    assert idle(gpus) == [0, 3]  # 1: its memory is taken; 2: busy
    assert [s.targets[0].gpus for s in gpu_slots([0, 1, 2, 3], 2)] == [(0, 1), (2, 3)]
    assert [s.targets[0].gpus for s in gpu_slots([0, 3, 5], 1)] == [(0,), (3,), (5,)]
    plan = Plan(device_kind=DeviceKind.GPU, strategy=Strategy.ONE_DEVICE, replicas_per_task=1)
    notes: list[str] = []
    slots = slots_for(plan, 4, notes, gpus=lambda: [0, 3])
    assert [s.name for s in slots] == ["gpu 0", "gpu 3"]
    assert "4 trials at once were asked, but 2 group(s) of 1 free GPU(s)" in notes[0]
    mirrored = Plan(device_kind=DeviceKind.GPU, strategy=Strategy.MIRRORED, replicas_per_task=2)
    assert [s.targets[0].gpus for s in slots_for(mirrored, 2, [], gpus=lambda: [0, 1, 3])] \
        == [(0, 1)]
    with pytest.raises(SweepError, match="No GPU of this machine is free"):
        slots_for(plan, 2, [], gpus=list)
    assert [s.name for s in slots_for(Plan(), 3, [])] == ["local-1", "local-2", "local-3"]


def test_trials_on_named_machines_one_each(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from dtgui.core.machines.registry import Machine, MachineRegistry
    from dtgui.launch.gpus.free_slots import machine_slots

    registry = MachineRegistry(tmp_path / "machines.toml")
    registry.add(Machine(name="gpu1", host="10.0.0.5", user="me"))
    slots = machine_slots(["local", "gpu1", "gpu1"], registry)
    assert [s.name for s in slots] == ["local #1", "gpu1 #2", "gpu1 #3"]
    assert [s.targets[0].name for s in slots] == ["local", "gpu1", "gpu1"]
    with pytest.raises(SweepError, match="No machine named nowhere is registered"):
        machine_slots(["gpu1", "nowhere"], registry)
    assert main(["sweep", str(tmp_path / "s"), "--param", "lr=choice:0.1,0.01",
                 "--trial-on", "local,local", "--on", "local"]) == 2
    assert "--trial-on runs each trial on one machine" in capsys.readouterr().err
    assert main(["sweep", str(tmp_path / "s"), "--param", "lr=choice:0.1,0.01",
                 "--slurm", "cluster"]) == 2
    assert "No Slurm cluster is registered as 'cluster'" in capsys.readouterr().err
    assert main(["sweep", str(tmp_path / "s"), "--param", "lr=choice:0.1,0.01",
                 "--slurm", "local", "--trial-on", "local"]) == 2
    assert "--slurm runs every trial as a job on the cluster" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()  # nothing started
