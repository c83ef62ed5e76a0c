"""A sweep exported as a folder of bundles plus one driver script that reruns it without dtgui
(docs/sweeps.md, "Exporting a sweep").

`export_sweep(folder, destination)` writes, for each trial of the sweep in `folder` (or the
`best` N finished ones), the bundle of that trial's run (its plan: the base plan with the
trial's values, `dtgui.core.sweeps.sweep.apply`; written by the one bundle writer,
`dtgui.core.bundles.bundle.render_bundle`) as `tNNN/`, then `sweep-trials.json` (each trial's number,
values and folder; the objective and its direction) and `rerun.py` (`dtgui.core.sweeps.sweep_rerun`,
copied as it is: the standard library only), and a README. Each trial is placed on one
machine, as a sweep's trial a machine runs; a multi-process trial's ports are chosen free now,
different for every trial, so that trials rerun at once do not collide.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from dtgui.core.bundles.bundle import BundleError, render_bundle
from dtgui.core.plans.placement import place_local, task_layout
from dtgui.core.plans.plan import Plan
from dtgui.core.sweeps.sweep import SweepError, SweepSpec, apply, load_sweep
from dtgui.core.sweeps.sweep_study import TrialRow, read_sweep
from dtgui.worker.machine_probe import choose_free_ports

RERUN_SCRIPT = "rerun.py"
TRIALS_FILE = "sweep-trials.json"  # the name dtgui.core.sweeps.sweep_rerun reads


def trial_plan(base: Plan, spec: SweepSpec, row: TrialRow) -> Plan:
    """The plan of one trial as the sweep ran it (not yet placed)."""
    return apply(base, row.params, spec.params).with_changes(
        run_name=f"{base.run_name}-t{row.number:03d}", tasks=(), cluster={})


def exported_rows(rows: list[TrialRow], spec: SweepSpec, best: int) -> list[TrialRow]:
    """The trials to export: every one that has all its values (best first), or the best
    `best` finished ones."""
    rows = [r for r in rows if all(p.name in r.params for p in spec.params)]
    if best:
        rows = [r for r in rows if r.state == "finished"][:best]
    return rows


def export_sweep(folder: Path, destination: Path, *, best: int = 0) -> list[Path]:
    """Write the exported sweep at `destination` (new or empty); the trials' bundles.
    SweepError says why it cannot be."""
    spec, base = load_sweep(folder)
    if base.tasks and any(not t.is_local for t in base.tasks):
        raise SweepError(["This sweep's trials each ran on several registered machines: export "
                          "a trial with `dtgui export` instead (its bundle runs with "
                          "`bash run.sh MACHINE` on each machine)."])
    rows = exported_rows(read_sweep(folder).rows, spec, best)
    if not rows:
        raise SweepError([f"{folder} holds no {'finished ' if best else ''}trial to export."])
    destination = destination.resolve()
    if destination.exists() and (not destination.is_dir() or any(destination.iterdir())):
        raise SweepError([f"{destination} exists and is not empty: choose a new or empty "
                          "folder."])
    plans = [trial_plan(base, spec, r) for r in rows]
    per_trial = len(task_layout(plans[0])) if plans[0].strategy.multi_process else 0
    ports = choose_free_ports(per_trial * len(plans)) if per_trial else []
    bundles, trials = [], []
    try:
        for i, (row, plan) in enumerate(zip(rows, plans, strict=True)):
            placed = place_local(plan, ports[i * per_trial:(i + 1) * per_trial] or None)
            name = f"t{row.number:03d}"
            bundles.append(render_bundle(placed, destination / name).path)
            trials.append({"number": row.number, "state": row.state,
                           "objective": row.objective, "bundle": name,
                           "params": {p.name: row.params[p.name] for p in spec.params}})
    except BundleError as exc:
        raise SweepError([f"A trial's bundle cannot be written: {exc}"]) from exc
    data = {"name": base.run_name, "objective": spec.objective, "direction": spec.goal,
            "parallel": spec.parallel, "gpus_per_trial": _gpus_per_trial(base),
            "trials": trials}
    (destination / TRIALS_FILE).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    shutil.copyfile(Path(__file__).with_name("sweep_rerun.py"), destination / RERUN_SCRIPT)
    (destination / "README.md").write_text(_readme(base, spec, rows), encoding="utf-8")
    return bundles


def _gpus_per_trial(plan: Plan) -> int:
    if not plan.on_gpu:
        return 0
    return max(1, plan.strategy.gpus_per_task(plan.replicas_per_task)) * plan.compute_tasks


def _readme(base: Plan, spec: SweepSpec, trials: list[TrialRow]) -> str:
    table = "\n".join(
        f"| {t.number} | {t.state} | {'' if t.objective is None else f'{t.objective:.6g}'} | "
        + ", ".join(f"{p.name}={t.params[p.name]}" for p in spec.params)
        + f" | `t{t.number:03d}/` |" for t in trials)
    gpu_line = ("python3 rerun.py --gpus 0,1,2,3     # each trial takes its own GPUs\n"
                if base.on_gpu else "")
    return f"""# Sweep {base.run_name}, exported

{len(trials)} trial(s) of a sweep over {', '.join(p.to_text() for p in spec.params)}
({spec.search} search; {spec.goal} {spec.objective}). Each folder `tNNN/` is the bundle of one
trial (its README says how it runs alone); `rerun.py` reruns them without dtgui:

```sh
python3 -m pip install -r t{trials[0].number:03d}/requirements.txt
python3 rerun.py                    # {spec.parallel} at a time; --parallel K, --only 0,3
PYTHON=/path/to/python python3 rerun.py   # the interpreter the tasks run with
{gpu_line}```

Each trial is printed as it ends with its {spec.objective}, read from its events
(`tNNN/output/events-*.jsonl`); at the end `rerun.csv` holds the trials best first. A
multi-process trial's ports were chosen free when the sweep was exported, different for each
trial.

| trial | state in the sweep | {spec.objective} | values | bundle |
|---|---|---|---|---|
{table}
"""
