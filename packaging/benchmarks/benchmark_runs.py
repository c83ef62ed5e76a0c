"""How fast the Runs page opens and filters with many runs (a script, not a test).

    .venv/bin/python packaging/benchmarks/benchmark_runs.py [--runs 10000] [--rounds 3]

Generates --runs finished run folders in a temporary data directory, each as a launch
leaves it: plan.json, run.json and a small events file (20 steps, 2 validations), with a
tenth tagged and noted. Then, in this process as in the GUI (offscreen Qt):

- first reading: the rows read without the runs' index (each run.json and plan.json), as
  the page shows them before their events are read;
- first summary: the events of every run read once (steps, best validation value), kept in
  the index (this is a one-time cost per run, done in the background after the list shows);
- open: `RunsPage.refresh()` until its rows are shown, with the index (every later opening);
- filter: typing a word in the filter until the rows are filtered, and clearing it;
- sort: clicking a column header.

Prints the medians over --rounds, wall time and this process's CPU time (on a loaded shared
machine the wall time includes waiting for a core). Targets: open <= 1 s, filter <= 100 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

if not os.environ.get("DISPLAY"):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

TARGET_OPEN_S, TARGET_FILTER_MS = 1.0, 100.0
WORDS = ("mirrored", "baseline", "run-0042", "failed", "nothing-matches")


Spent = tuple[float, float]  # (wall, CPU) seconds


def clock() -> Spent:
    return time.perf_counter(), time.process_time()


def since(start: Spent) -> Spent:
    wall, cpu = clock()
    return wall - start[0], cpu - start[1]


def ms(values: list[Spent]) -> str:
    walls, cpus = [v[0] for v in values], [v[1] for v in values]
    return (f"median {statistics.median(walls) * 1000:.0f} ms (CPU "
            f"{statistics.median(cpus) * 1000:.0f} ms), max {max(walls) * 1000:.0f} ms")


def generate(root: Path, count: int) -> None:
    from dtgui.core.plans.placement import place_local
    from dtgui.core.plans.plan import Plan
    from dtgui.core.plans.strategies import Strategy
    from dtgui.core.runs.records import RunRecord
    from dtgui.core.runs.run_index import Notes

    plan = place_local(Plan(run_name="x", strategy=Strategy.MIRRORED, replicas_per_task=2,
                            steps=20), [12345])
    plan_json = json.loads(plan.to_json())
    now = time.time()
    for i in range(count):
        name = f"run-{i:04d}"
        folder = root / name
        (folder / "output").mkdir(parents=True)
        (folder / "plan.json").write_text(json.dumps({**plan_json, "run_name": name}))
        events = [{"v": 1, "kind": "step", "task": "worker:0", "t": now + s, "step": s,
                   "loss": 1.0 / s, "replica_losses": [1.0 / s, 1.1 / s],
                   "replica_ids": [0, 1]} for s in range(1, 21)]
        events += [{"v": 1, "kind": "validation", "task": "worker:0", "t": now + s,
                    "step": s, "loss": 2.0 / s + i * 1e-6, "metrics": {}} for s in (10, 20)]
        (folder / "output" / "events-worker-0.jsonl").write_text(
            "".join(json.dumps(e) + "\n" for e in events))
        state = "failed" if i % 17 == 0 else "finished"
        RunRecord(f"{name}-abc", name, str(folder), "mirrored", created=now - i * 60,
                  state=state, final_loss=0.05 + i * 1e-7, ended=now - i * 60 + 300).save()
        if i % 10 == 0:
            Notes(tags=["baseline"], note=f"run {i}\nsecond line").write(folder)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="dtgui-bench-runs-"))
    os.environ["DTGUI_DATA_DIR"] = str(base / "data")
    os.environ["DTGUI_CONFIG_DIR"] = str(base / "config")
    from PySide6.QtWidgets import QApplication

    from dtgui.core.runs.run_index import INDEX_NAME
    from dtgui.core.settings import runs_dir
    from dtgui.launch.run_admin import fill_rows, list_rows
    from dtgui.ui.pages.runs_model import FINAL_LOSS, STARTED
    from dtgui.ui.pages.runs_page import RunsPage

    app = QApplication.instance() or QApplication([])
    started = time.perf_counter()
    generate(runs_dir(), args.runs)
    print(f"generated {args.runs} runs in {time.perf_counter() - started:.1f} s ({base})")

    first: list[Spent] = []
    summary: list[Spent] = []
    opened: list[Spent] = []
    filtered: list[Spent] = []
    cleared: list[Spent] = []
    sorted_: list[Spent] = []
    header = None
    for _ in range(args.rounds):
        (runs_dir() / INDEX_NAME).unlink(missing_ok=True)
        t = clock()
        rows = list_rows(summarize_ended=False)
        first.append(since(t))
        assert len(rows) == args.runs and not any(r.summarized for r in rows)
        t = clock()
        fill_rows(rows)
        summary.append(since(t))

        page = RunsPage()
        page.resize(1366, 768)
        page.show()
        app.processEvents()
        t = clock()
        page.refresh()
        while page.row_count() < args.runs:
            app.processEvents()
        app.processEvents()  # painted
        opened.append(since(t))
        assert page.row_at(0).summarized and page.row_at(0).best_val is not None
        for word in WORDS:
            t = clock()
            page.filter_edit.setText(word)
            app.processEvents()
            filtered.append(since(t))
            t = clock()
            page.filter_edit.setText("")
            app.processEvents()
            cleared.append(since(t))
        header = page.table.horizontalHeader()
        for column in (FINAL_LOSS, STARTED):
            t = clock()
            header.setSortIndicator(column, header.sortIndicatorOrder())
            app.processEvents()
            sorted_.append(since(t))
        page.close()
        page.deleteLater()
        app.processEvents()

    print(f"first reading, no index ({args.runs} runs): {ms(first)}")
    print(f"first summary of every run's events (once, in the background): {ms(summary)}")
    print(f"open, with the index: {ms(opened)} (target {TARGET_OPEN_S * 1000:.0f} ms)")
    print(f"filter, a word typed: {ms(filtered)} (target {TARGET_FILTER_MS:.0f} ms)")
    print(f"filter cleared: {ms(cleared)}")
    print(f"sort by a column: {ms(sorted_)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
