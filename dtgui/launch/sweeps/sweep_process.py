"""A sweep's queue in a process of its own, so that it goes on while dtgui is closed
(docs/sweeps.md); and the queue in the foreground, as `dtgui sweep OUT` runs it.

`start_sweep(folder, spec, plan)` checks the sweep and writes its folder (once:
`dtgui.launch.sweeps.sweep_queue.prepare_sweep`), then starts

    python -m dtgui.launch.sweeps.sweep_process FOLDER

in a session of its own (`dtgui.launch.runs.detached`, as the run watcher is), its output in
`FOLDER/sweep.log`; that process goes on with the sweep the folder holds. `resume_sweep(folder,
trials)` goes on with a sweep that ended (or was stopped) up to `trials` in all.
`sweep_pid(folder)` says whether it still runs; `stop_sweep(folder)` asks it to stop (SIGTERM:
it stops the running trials and exits). Quick: nothing here waits for the sweep.

`run_sweep(queue, out, err)` runs a queue to its end, saying each trial as it ends: the
detached process and the command line alike.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
from pathlib import Path
from typing import TextIO

from dtgui.core.plans.plan import Plan
from dtgui.core.sweeps.sweep import SweepError, SweepSpec, load_sweep, save_sweep
from dtgui.launch.drivers import job_readers
from dtgui.launch.runs.detached import Detached

MODULE = "dtgui.launch.sweeps.sweep_process"
PID_FILE = "sweep.pid"
LOG_FILE = "sweep.log"
SWEEP_PROCESS = Detached(MODULE, PID_FILE, LOG_FILE)
PROG = "dtgui sweep"


def start_sweep(folder: Path, spec: SweepSpec, plan: Plan, python: str = "") -> int:
    """Start the sweep in the background; its pid. SweepError when it cannot run (its
    storage cannot be reached ...), or when a sweep process already runs in `folder`."""
    from dtgui.launch.sweeps.sweep_queue import prepare_sweep

    if sweep_pid(folder) is not None:
        raise SweepError([f"A sweep already runs in {folder}."])
    prepare_sweep(folder, spec, plan)  # the study made here: the view and the process open it
    return SWEEP_PROCESS.start(folder, python=python)


def resume_sweep(folder: Path, trials: int, python: str = "") -> int:
    """Go on with the sweep in `folder` in the background, up to `trials` trials in all; its
    pid. SweepError when the folder holds no sweep, or its process still runs."""
    spec, plan = load_sweep(folder, job_readers())  # a folder without a sweep: said here, not in the log
    if sweep_pid(folder) is not None:
        raise SweepError([f"A sweep already runs in {folder}."])
    if trials != spec.trials:
        save_sweep(folder, dataclasses.replace(spec, trials=trials), plan)
    return SWEEP_PROCESS.start(folder, python=python)


def sweep_pid(folder: Path) -> int | None:
    """The pid of the sweep process of `folder` while it runs, else None."""
    return SWEEP_PROCESS.pid(folder)


def stop_sweep(folder: Path) -> bool:
    """Ask the sweep process to stop (its running trials are stopped); False when none
    runs."""
    if sweep_pid(folder) is None:
        return False
    SWEEP_PROCESS.stop(folder, timeout=0)
    return True


def run_sweep(folder: Path, spec: SweepSpec, plan: Plan, out: TextIO, err: TextIO) -> int:
    """Run the prepared sweep in `folder` to its end (SIGINT / SIGTERM stop it), each trial
    said on `out` as it ends and the queue's notes on `err`; the exit status (0: a trial has
    an objective, 1: none has, 130: stopped)."""
    from dtgui.core.sweeps.sweep_study import TRIALS_CSV, sorted_rows
    from dtgui.launch.sweeps.sweep_queue import SweepQueue

    queue = SweepQueue(folder, spec, plan,
                       on_trial_end=lambda row: print(row.text(spec.objective), file=out,
                                                      flush=True),
                       on_note=lambda note: print(f"{PROG}: note: {note}", file=err,
                                                  flush=True))
    stopped = []

    def stop(*_: object) -> None:
        stopped.append(True)
        queue.request_stop()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    if queue.study.get_trials(deepcopy=False):
        print(f"going on with the sweep in {folder}", file=out)
    for note in queue.notes:
        print(f"{PROG}: note: {note}", file=err)
    print(f"sweep {plan.run_name}: {spec.trials} trial(s), {spec.parallel} at a time, "
          f"{spec.search} search over {', '.join(p.to_text() for p in spec.params)}; "
          f"{spec.goal} {spec.objective}; Ctrl-C stops", file=out, flush=True)
    rows = queue.run()
    ranked = sorted_rows(rows, spec.goal)
    counts = {s: sum(1 for r in rows if r.state == s)
              for s in ("finished", "pruned", "stopped", "failed")}
    print(f"sweep {'stopped' if stopped else 'complete'}: "
          + ", ".join(f"{n} {s}" for s, n in counts.items() if n), file=out)
    if ranked and ranked[0].state == "finished":
        print(f"best: {ranked[0].text(spec.objective)}\n  run: {ranked[0].run}", file=out)
    print(f"trials: {folder / TRIALS_CSV}", file=out, flush=True)
    if stopped:
        return 130
    return 0 if any(r.objective is not None for r in rows) else 1


def main(argv: list[str] | None = None) -> int:
    """The detached process: go on with the sweep its folder holds (checked and written when
    it was started)."""
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}",
                                     description="Run a sweep's queue in the background.")
    parser.add_argument("folder", type=Path, help="the sweep's folder (sweep.json)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with SWEEP_PROCESS.claim(args.folder):
            spec, plan = load_sweep(args.folder, job_readers())
            return run_sweep(args.folder, spec, plan, sys.stdout, sys.stderr)
    except SweepError as exc:
        for problem in exc.problems:
            print(f"{PROG}: {problem}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
