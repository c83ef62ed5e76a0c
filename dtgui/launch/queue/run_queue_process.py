"""The run queue's process (`dtgui.launch.queue.run_queue`): started detached as

    python -m dtgui.launch.queue.run_queue_process FOLDER

it looks at the queue every POLL_SECONDS while runs wait. Each look, in order: an entry that
a waiting entry ahead of it wants the same GPU (or machine) as waits for it; the others are
asked what they wait for (`RunQueue.waits_for`: the sweeps' `GpuProber.taken` for their GPUs,
the dtgui runs on their machines for a CPU run; a batch scheduler's job waits for nothing
here); the first that waits for nothing is launched through `launch_plan` (its GPUs held in
the sweeps' register meanwhile), handed to a run watcher, and leaves the queue (a failed
launch stays, failed, with its error line). What each waits for is written back. It ends when
nothing waits (its pid file removed under the queue's lock, so that an enqueue then starts
another), on SIGTERM, or, exit 2, on a damaged queue file (said in its log, left as it is).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from dtgui.core.machines.registry import MachineRegistry
from dtgui.core.plans.plan import LOCAL_MACHINE, Plan
from dtgui.core.runs.queue_file import (
    FAILED,
    STARTING,
    QueueEntry,
    QueueError,
    ahead_of,
    with_state,
)
from dtgui.core.runs.run_state import RunState
from dtgui.core.settings import runs_dir
from dtgui.launch.controller import LaunchError, RunController
from dtgui.launch.drivers import driver_for, job_readers
from dtgui.launch.gpus.free_slots import GpuProber, active_run_plans
from dtgui.launch.gpus.holds import HoldRegister
from dtgui.launch.queue.run_queue import (
    MODULE,
    QUEUE_PROCESS,
    change_queue,
    entry_targets,
    locked_queue,
    read_queue,
)

log = logging.getLogger("dtgui.queue")
POLL_SECONDS = 2.0


Launcher = Callable[..., RunController]


class RunQueue:
    """The loop of the queue's process: each look starts at most one run (the first that
    may), and writes what the others wait for."""

    def __init__(self, folder: Path, launch: Launcher | None = None) -> None:
        from dtgui.launch.start.pipeline import launch_plan

        self.folder = folder
        self.launch = launch or launch_plan
        self.prober = GpuProber({m.name: m for m in MachineRegistry().machines()})
        self.stopping = False

    def serve(self) -> int:
        """Until nothing waits (0), or the file is damaged (2: said in the log, left as it
        is), or SIGTERM."""
        try:
            self._settle_starting()
            while not self.stopping:
                if not self.look():
                    return 0
                time.sleep(POLL_SECONDS)
            return 0
        except QueueError as exc:
            log.error("%s", exc)
            return 2
        finally:
            self.prober.close()

    def _settle_starting(self) -> None:
        """Entries a queue process was starting when it ended (killed, the machine shut
        down): failed, for the person to look at the Runs page and cancel them."""
        change_queue(self.folder, lambda entries: [
            with_state(e, FAILED, error="the queue's process ended while it started this "
                       "run: see on the Runs page whether it runs, then cancel it here")
            if e.state == STARTING else e for e in entries])

    def look(self) -> bool:
        """One look; False when nothing waits any more (the process then ends)."""
        with locked_queue(self.folder):
            entries = read_queue(self.folder)
            if not any(e.waiting for e in entries):
                QUEUE_PROCESS.forget(self.folder, None)  # an enqueue now starts another
                return False
        found: dict[str, str] = {}
        chosen: QueueEntry | None = None
        for i, entry in enumerate(entries):
            if not entry.waiting:
                continue
            first = ahead_of(entries, i)
            if first is not None:
                found[entry.id] = f"{first.name} (ahead of it) to start first"
                continue
            why = self.waits_for(entry)
            found[entry.id] = why
            if not why and chosen is None:
                chosen = entry
                break
        chosen = self._note(found, chosen)
        if chosen is not None:
            self.start(chosen)
        return True

    def _note(self, found: dict[str, str], chosen: QueueEntry | None) -> QueueEntry | None:
        """Write what each entry waits for (those still queued), and mark the chosen one
        starting (None when it was cancelled meanwhile)."""
        picked: list[QueueEntry] = []

        def note(entries: list[QueueEntry]) -> list[QueueEntry]:
            out = []
            for entry in entries:
                if entry.waiting and chosen is not None and entry.id == chosen.id:
                    entry = with_state(entry, STARTING, waits_for="")
                    picked.append(entry)
                elif entry.waiting and entry.id in found:
                    entry = replace(entry, waits_for=found[entry.id])
                out.append(entry)
            return out

        change_queue(self.folder, note)
        return picked[0] if picked else None

    def waits_for(self, entry: QueueEntry) -> str:
        """What the entry waits for now ("": it may start)."""
        try:
            plan = Plan.from_dict(entry.plan)
            targets = entry_targets(plan, self._job(entry))
        except (QueueError, ValueError, TypeError) as exc:
            return f"it cannot start: {exc}"
        runs = active_run_plans()
        reasons = []
        for target in targets:
            if driver_for(target).whole_run:
                continue
            if plan.on_gpu or target.gpus:
                why = self.prober.taken(target.name, target.gpus or None)
            else:
                key = LOCAL_MACHINE if target.is_local else target.name
                other = next((p.run_name for p in runs if key in p.machine_names), "")
                why = f"run {other} on {target.label}" if other else ""
            if why:
                reasons.append(why)
        return "; ".join(reasons)

    @staticmethod
    def _job(entry: QueueEntry) -> object | None:
        if entry.job is None:
            return None
        fields = dict(entry.job)
        kind = str(fields.pop("kind", ""))
        readers = job_readers()
        if kind not in readers:
            raise QueueError(f"no driver knows jobs of kind {kind!r}")
        return readers[kind](fields)

    def start(self, entry: QueueEntry) -> None:
        """Launch the entry through the one pipeline and hand its run to a watcher; it
        leaves the queue (or stays, failed, with the reason)."""
        from dtgui.launch.runs.policy import RunPolicy
        from dtgui.launch.start.watcher import start_watcher

        # its GPUs held from now (sweeps and the wizard read the register), until its
        # record holds them
        holds = HoldRegister(entry.name)
        try:
            plan = Plan.from_dict(entry.plan)
            targets = entry_targets(plan, self._job(entry))
            for i, target in enumerate(targets):
                if not driver_for(target).whole_run:
                    holds.hold(i, target.name, target.gpus, run=entry.name)
            controller = self.launch(
                plan, Path(entry.runs_root) if entry.runs_root else runs_dir(),
                targets=targets, policy=RunPolicy(max_restarts=entry.max_restarts),
                keep_ports=False)
        except (LaunchError, QueueError, OSError, ValueError, TypeError) as exc:
            error = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            log.warning("%s could not start: %s", entry.name, error)
            change_queue(self.folder, lambda entries: [
                with_state(e, FAILED, error=error) if e.id == entry.id else e
                for e in entries])
            return
        finally:
            holds.close()
        log.info("%s started: %s", entry.name, controller.bundle.path)
        controller.detach()
        # still training (not ended before the detach): a watcher keeps its policy
        if controller.record is not None and controller.state is RunState.DETACHED:
            try:
                start_watcher(controller.record, None, entry.max_restarts)
            except OSError as exc:
                log.warning("%s runs without a watcher (%s): reattach to it from the Runs "
                            "page.", entry.name, exc)
        change_queue(self.folder, lambda entries: [e for e in entries if e.id != entry.id])


def main(argv: list[str] | None = None) -> int:
    """The detached process: run the queue in FOLDER until nothing waits."""
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}",
                                     description="Start queued runs when they are free.")
    parser.add_argument("folder", type=Path, help="the queue's folder (queue.json)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    queue = RunQueue(args.folder)

    def stop(*_: object) -> None:
        queue.stopping = True

    signal.signal(signal.SIGTERM, stop)
    with QUEUE_PROCESS.claim(args.folder):
        return queue.serve()


if __name__ == "__main__":
    sys.exit(main())
