"""A sweep of an own script's argument across two SSH test hosts, one trial per host at a
time: each trial is launched on its host through the launch pipeline (check, upload, start),
its printed validation loss read back live."""

from __future__ import annotations

import itertools
from pathlib import Path

import conftest_ssh
import sshhosts
from conftest_ssh import machine, trust

from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.scripts.script import ScriptModel
from dtgui.core.sweeps.sweep import SweepSpec, parse_param
from dtgui.core.sweeps.sweep_study import TrialRow
from dtgui.launch.gpus.free_slots import Slot
from dtgui.launch.sweeps.sweep_queue import SweepQueue
from dtgui.launch.targets import Target

ssh_lab = conftest_ssh.ssh_lab
ssh_env = conftest_ssh.ssh_env
real_keyring = conftest_ssh.real_keyring
lab_python = conftest_ssh.lab_python_each_test  # per test: the tests spread over the workers
PROJECT = Path(__file__).resolve().parent / "script_projects" / "sweep_target"


def test_a_script_sweep_runs_one_trial_per_host_at_a_time(
        tmp_path: Path, ssh_lab: sshhosts.SshLab, lab_python: str, ssh_env: Path) -> None:
    trust(*ssh_lab.hosts)
    hosts = {h.name: h for h in ssh_lab.hosts}
    slots = [Slot(name, (Target(name, machine(ssh_lab, hosts[name]), python=lab_python),))
             for name in ("h2", "h3")]
    model = ScriptModel(str(PROJECT), "train.py", ("--steps", "6", "--seconds", "0.3"))
    plan = Plan(run_name="hosts", strategy=Strategy.ONE_DEVICE, replicas_per_task=1,
                checkpoint_every=0, model=model)
    spec = SweepSpec(params=(parse_param("--x=uniform:0:1"),), trials=4, parallel=2,
                     search="random", pruner="none")
    rows = SweepQueue.new(tmp_path / "s", spec, plan, slots=slots).run()
    assert [r.state for r in rows] == ["finished"] * 4, [r.error for r in rows]
    assert all(r.objective is not None and r.best_step == 6 for r in rows)
    def span(row: TrialRow) -> tuple[float, float]:
        assert row.started is not None and row.ended is not None, row
        return row.started, row.ended

    by_host = {name: sorted(span(r) for r in rows if r.machine == name) for name in ("h2", "h3")}
    assert all(len(spans) == 2 for spans in by_host.values()), by_host
    for spans in by_host.values():  # one trial a host at a time
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
    first_h2, first_h3 = by_host["h2"][0], by_host["h3"][0]
    assert first_h2[0] < first_h3[1] and first_h3[0] < first_h2[1]
