"""A sweep whose trials are Slurm jobs, on a real Slurm (slurmctld + two slurmd + munged on this
machine, tests/slurm_cluster.py; this machine is the login node): `dtgui sweep --slurm local`
submits each trial as a job of its own through the one launch pipeline, `--parallel 2` of
them in the queue at once, and Slurm places them. The trials train with the stub training
child (tests/stub_task.py) under the real supervisor: no TensorFlow."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
import pytest
from slurm_cluster import SlurmCluster, served_cluster

from dtgui.core.runs.records import RunRecord
from dtgui.core.slurm import SlurmJob
from dtgui.core.sweeps.sweep import load_sweep
from dtgui.launch.drivers import job_readers


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    yield from served_cluster()


def test_a_two_trial_sweep_runs_each_trial_as_a_slurm_job(
        slurm: SlurmCluster, tmp_path: Path, stub_python: Callable[..., str]) -> None:
    out = tmp_path / "sweep"
    python = stub_python(step_seconds=0.1)
    done = subprocess.run(
        [sys.executable, "-m", "dtgui.cli.main", "sweep", str(out), "--trials", "2",
         "--parallel", "2", "--param", "lr=choice:0.01,0.02", "--search", "grid",
         "--objective", "loss", "--pruner", "none", "--steps", "20",
         "--slurm", "local", "--python", f"local={python}"],
        capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sweep complete: 2 finished" in done.stdout, done.stdout

    spec, _ = load_sweep(out, job_readers())
    job = spec.job  # kept in sweep.json: a sweep opened again submits the same job
    assert isinstance(job, SlurmJob) and job.cluster == "local" and job.nodes == 1

    study = optuna.load_study(study_name="sweep", storage=f"sqlite:///{out / 'study.db'}")
    trials = study.get_trials(deepcopy=False)
    assert sorted(t.params["lr"] for t in trials) == [0.01, 0.02]
    assert all(t.state is optuna.trial.TrialState.COMPLETE for t in trials)
    jobs = set()
    for trial in trials:
        assert trial.user_attrs["machine"].startswith("local job #")
        record = RunRecord.load(Path(trial.user_attrs["bundle"]))
        assert record.machines[0].job_id  # a Slurm job, followed from its id
        jobs.add(record.machines[0].job_id)
    assert len(jobs) == 2  # a job a trial
    # both were in the queue at once (Slurm placed them; the intervals overlap)
    (a, b) = sorted((t.user_attrs["started"], t.user_attrs["ended"]) for t in trials)
    assert b[0] < a[1], (a, b)
    assert slurm.drained() == []
