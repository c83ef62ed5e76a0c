"""A real sweep: `dtgui sweep` over the built-in demo's learning rate and batch size, 6 trials
2 at a time on this machine, each a short TensorFlow run validated every epoch (so the median
pruner has values)."""

from __future__ import annotations

import csv
import itertools
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from dtgui.core.sweeps.sweep_study import STUDY_FILE, STUDY_NAME, TRIALS_CSV

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_six_trial_sweep_of_the_demo_runs_two_at_a_time(tmp_path: Path) -> None:
    out = tmp_path / "lr-batch"
    proc = subprocess.run(
        [sys.executable, "-m", "dtgui", "sweep", str(out), "--trials", "6", "--parallel", "2",
         "--param", "lr=loguniform:1e-4:1e-1", "--param", "batch-size=choice:16,32,64",
         "--search", "tpe", "--pruner", "median", "--strategy", "one_device",
         "--steps", "9", "--steps-per-epoch", "3", "--checkpoint-every", "0"],
        capture_output=True, text=True, timeout=400, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ended = [line for line in proc.stdout.splitlines() if line.startswith("trial ")]
    assert len(ended) == 6, proc.stdout  # each trial printed as it ended

    study = optuna.load_study(study_name=STUDY_NAME, storage=f"sqlite:///{out / STUDY_FILE}")
    trials = study.get_trials()
    assert len(trials) == 6
    assert {t.state for t in trials} <= {TrialState.COMPLETE, TrialState.PRUNED,
                                         TrialState.FAIL}
    complete = [t for t in trials if t.state is TrialState.COMPLETE]
    assert complete, proc.stdout
    assert all(t.value is not None for t in trials if t.state is not TrialState.FAIL)
    assert all(set(t.params) == {"lr", "batch-size"} for t in trials)
    # the best trial's best validation loss is the study's best
    assert study.best_value == min(t.value for t in complete if t.value is not None)
    # two at a time: some trials' runs overlapped
    spans = sorted((t.user_attrs["started"], t.user_attrs["ended"]) for t in trials)
    assert any(b[0] < a[1] for a, b in itertools.pairwise(spans)), spans
    # each trial is a run of its own with its curves
    for t in trials:
        if t.state is not TrialState.FAIL:
            assert list(Path(t.user_attrs["bundle"]).glob("output/events-*.jsonl"))

    with (out / TRIALS_CSV).open() as f:
        table = list(csv.DictReader(f))
    assert sorted(int(r["trial"]) for r in table) == list(range(6))
    assert table[0]["val_loss"] == repr(study.best_value)  # best first
    assert f"best: trial {study.best_trial.number} " in proc.stdout
