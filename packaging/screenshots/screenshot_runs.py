"""Screenshots of the Runs page in the real main window at 1366x768 and 1920x1080 (and at
1366x768 beside the machines column): runs of every state and strategy with tags and notes,
and a sweep expanded to its trials.

  xvfb-run -a -s "-screen 0 1920x1080x24" .venv/bin/python packaging/screenshots/screenshot_runs.py OUTDIR

The runs are written as a launch leaves them (plan.json, run.json, events); nothing trains.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import shots

shots.sandbox()

from dtgui.core.plans.placement import place_local  # noqa: E402 - after the sandbox
from dtgui.core.plans.plan import Plan  # noqa: E402
from dtgui.core.plans.strategies import Strategy  # noqa: E402
from dtgui.core.runs.records import MachineRecord, RunRecord  # noqa: E402
from dtgui.core.runs.run_index import Notes  # noqa: E402
from dtgui.core.settings import runs_dir  # noqa: E402

RUNS = [  # name, strategy, state, machines, minutes, final loss, tags, note
    ("resnet-baseline", Strategy.MIRRORED, "finished", [], 42, 0.0412, ["baseline"],
     "The reference run.\nCompare everything against it."),
    ("resnet-lr-0.1", Strategy.MIRRORED, "failed", [], 3, None, ["lr"], "NaN at step 310"),
    ("bert-mwm-4", Strategy.MULTI_WORKER_MIRRORED, "running", ["gpu-a", "gpu-b"], 95, None,
     [], ""),
    ("bert-mwm-2", Strategy.MULTI_WORKER_MIRRORED, "stopped", ["gpu-a"], 61, 1.873, ["bert"],
     "Stopped for the 4-machine run"),
    ("tiny-mlp", Strategy.ONE_DEVICE, "finished", [], 1, 4.01e-05, [], ""),
    ("cifar-overnight", Strategy.MIRRORED, "lost", [], 300, None, ["overnight"],
     "The machine rebooted at 3 am: resume it"),
    ("ps-async", Strategy.PARAMETER_SERVER, "finished", ["gpu-a", "gpu-b"], 130, 0.2231,
     ["ps", "async"], ""),
    ("slurm-8-nodes", Strategy.MULTI_WORKER_MIRRORED, "finished", ["cluster"], 240, 0.0877,
     ["slurm"], "8 nodes x 4 GPUs on the partition gpu"),
]


MESSAGES = {"lost": "none of its processes is left (a crash, a reboot, the OOM killer or a kill "
                    "ended them) at step 700; its last whole checkpoint is at step 600: resume "
                    "it to go on from there"}


def write_run(root: Path, name: str, strategy: Strategy, state: str, machines: list[str],
              minutes: float, loss: float | None, created: float) -> Path:
    folder = root / name
    (folder / "output").mkdir(parents=True)
    plan = place_local(Plan(run_name=name, strategy=strategy, replicas_per_task=1,
                            workers=2 if strategy.multi_process else 1,
                            parameter_servers=1 if "ps" in strategy.task_types else 0,
                            steps=2000), None)
    (folder / "plan.json").write_text(plan.to_json())
    steps = 2000 if state == "finished" else 700
    events = [{"v": 1, "kind": "step", "task": plan.tasks[0].task_id, "t": created + s,
               "step": s, "loss": 2.0 / s, "replica_losses": [2.0 / s], "replica_ids": [0]}
              for s in range(100, steps + 1, 100)]
    events += [{"v": 1, "kind": "validation", "task": plan.tasks[0].task_id,
                "t": created + s, "step": s, "loss": 2.4 / s, "metrics": {"accuracy":
                                                                         0.9 + s / 40000}}
               for s in range(500, steps + 1, 500)]
    (folder / "output" / f"events-{plan.tasks[0].file_stem}.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in events))
    record = RunRecord(f"{name}-1a2b3c", name, str(folder), str(strategy), created=created,
                       state=state, final_loss=loss, message=MESSAGES.get(state, ""),
                       ended=None if state == "running" else created + minutes * 60,
                       machines=[MachineRecord(m, f"/home/me/.cache/dtgui/runs/{name}-1a2b3c/{m}")
                                 for m in machines])
    record.save()
    return folder


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for i, (name, strategy, state, machines, minutes, loss, tags, note) in enumerate(RUNS):
        folder = write_run(runs_dir(), name, strategy, state, machines, minutes, loss,
                           now - i * 5400)
        if tags or note:
            Notes(tags=tags, note=note).write(folder)
    sweep = runs_dir().parent / "sweeps" / "mirrored-20261129-041500-sweep"
    (sweep / "trials").mkdir(parents=True)
    base = Plan(run_name="mirrored-20261129-041500", strategy=Strategy.MIRRORED,
                replicas_per_task=2)
    (sweep / "sweep.json").write_text(json.dumps({"spec": {}, "plan": base.to_dict()}))
    for n in range(4):
        write_run(sweep / "trials", f"mirrored-20261129-041500-t{n:03d}", Strategy.MIRRORED,
                  "finished", [],
                  4 + n, 0.3 / (n + 1), now - 2 * 3600 - n * 300)

    from dtgui.core.runs.records import remember_sweep
    from dtgui.ui.app import make_app
    from dtgui.ui.main_window import MainWindow

    remember_sweep(sweep)
    app = make_app()
    window = MainWindow()
    window.show()
    window.show_runs()
    page = window.runs_page
    shots.wait_until(app, lambda: page.row_count() == len(RUNS) + 1, 30)
    shots.wait_until(app, lambda: page.row_at(0).summarized, 30)
    sweep_row = next(i for i in range(page.row_count()) if page.row_at(i).kind == "sweep")
    page.model.toggle(page.row_at(sweep_row))
    page.proxy.refilter()
    page.select(0)
    for width, height in ((1366, 768), (1920, 1080)):
        window.resize(width, height)
        shots.settle(app, 0.5)
        shots.save(app, window, out / f"runs_page_{width}x{height}.png")
    window.acts.column.trigger()  # the machines column beside the page (View menu)
    window.resize(1366, 768)
    shots.settle(app, 0.5)
    shots.save(app, window, out / "runs_page_1366x768_column.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
