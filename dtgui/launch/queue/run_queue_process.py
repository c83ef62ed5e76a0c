"""The run queue's process (`dtgui.launch.queue.run_queue`): started detached as

    python -m dtgui.launch.queue.run_queue_process FOLDER

it looks at the queue every POLL_SECONDS while runs wait. Each look, in order: an entry that
a waiting entry ahead of it wants the same GPU (or machine) as waits for it; the others are
asked what they wait for (`RunQueue.waits_for`: the sweeps' `GpuProber.taken` for their GPUs,
the dtgui runs on their machines for a CPU run, every run however it was started:
`active_run_plans`; a batch scheduler's job waits for nothing here); the first that waits
for nothing is launched through `launch_plan` (an exported bundle through `launch_bundle`;
its GPUs held in the sweeps' register meanwhile), handed to a run watcher, and leaves the
queue. What each waits for is written back.

A run that cannot start never holds the queue: whatever its launch raised (a model file or
script gone, a damaged bundle, a machine removed or unreachable, a port taken) ends it
"could not start" with the cause's first line, and the next look goes on with the next. Any
other error of a look is written to the log with its traceback and the process ends (1);
the next dtgui entry starts another (`resume_queue`). A new process first settles the
launches one that ended left (`RunQueue.settle`): a run its launch recorded goes on under a
watcher (or, cancelled meanwhile, is stopped), one whose launch failed could not start, one
never recorded waits again in its place. It ends when nothing waits (its pid file removed
under the queue's lock, so that an enqueue then starts another), on SIGTERM, or, exit 2, on
a damaged queue file (said in its log, left as it is).
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

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.machines.registry import MachineRegistry
from dtgui.core.plans.plan import LOCAL_MACHINE, Plan
from dtgui.core.runs.queue_file import (
    CANCELLED,
    FAILED,
    STARTING,
    WAITING,
    QueueEntry,
    QueueError,
    ahead_of,
    with_state,
)
from dtgui.core.runs.records import RunHistory, RunRecord
from dtgui.core.runs.run_state import RunState
from dtgui.core.settings import runs_dir
from dtgui.core.target_job import TargetJob
from dtgui.launch.controller import RunController
from dtgui.launch.drivers import driver_for, job_readers
from dtgui.launch.gpus.free_slots import GpuProber, active_run_plans, holds_machines
from dtgui.launch.gpus.holds import HoldRegister
from dtgui.launch.queue.run_queue import (
    MODULE,
    QUEUE_PROCESS,
    QueuedRun,
    change_queue,
    entry_targets,
    locked_queue,
    open_bundle,
    queue_dir,
    read_queue,
)
from dtgui.launch.targets import Target

log = logging.getLogger("dtgui.queue")
POLL_SECONDS = 2.0
STOP_SECONDS = 60.0  # a cancelled run's stop, at most


Launcher = Callable[..., RunController]


def first_line(exc: BaseException) -> str:
    """An error in a few words: its first line (its type when it says nothing)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class RunQueue:
    """The loop of the queue's process: each look starts at most one run (the first that
    may), and writes what the others wait for."""

    def __init__(self, folder: Path, launch: Launcher | None = None,
                 launch_bundle: Launcher | None = None) -> None:
        from dtgui.launch.start import pipeline

        self.folder = folder
        self.launch = launch or pipeline.launch_plan
        self.launch_bundle = launch_bundle or pipeline.launch_bundle
        self.prober = GpuProber({m.name: m for m in MachineRegistry().machines()})
        self.stopping = False
        self.again = False  # the last look ended a run that could not start

    def serve(self) -> int:
        """Until nothing waits (0), or the file is damaged (2: said in the log, left as it
        is), or SIGTERM; any other error is logged with its traceback (1)."""
        try:
            self.settle()
            while not self.stopping:
                self.again = False
                if not self.look():
                    return 0
                if not self.again:  # a run that could not start: the next looked at now
                    time.sleep(POLL_SECONDS)
            return 0
        except QueueError as exc:
            log.error("%s", exc)
            return 2
        except Exception:
            log.exception("The queue's process ended on an error (the next dtgui command "
                          "or the Runs page starts it again)")
            return 1
        finally:
            self.prober.close()

    # -- launches a process that ended left ----------------------------------------------
    def settle(self) -> None:
        """Each entry a queue process was launching when it ended (killed, the machine shut
        down): its run, when the launch recorded one, goes on under a watcher and leaves the
        queue (stopped, when it was cancelled meanwhile); a launch that failed could not
        start, with the record's reason; one that never got as far as its record waits
        again in its place (a cancelled one leaves)."""
        for entry in [e for e in read_queue(self.folder) if e.launching]:
            if not entry.started:  # written by a dtgui that did not note when: unknown
                self._fail(entry, "the queue's process ended while it started this run: see "
                           "on the Runs page whether it runs, then cancel it here")
                continue
            record = self._record_of(entry)
            if record is not None and record.is_active and holds_machines(record):
                note = self._adopt(entry, record)
                log.info("%s was started by a queue process that ended: %s", entry.name, note)
                self._drop(entry)
            elif record is not None:
                self._fail(entry, record.message or f"its launch ended {record.state}")
            elif entry.state == CANCELLED:
                self._drop(entry)
            else:
                log.info("%s: the queue's process ended while it started it; it waits again",
                         entry.name)
                self._wait_again(entry)

    def _record_of(self, entry: QueueEntry) -> RunRecord | None:
        """The record the entry's launch wrote (None: it wrote none; a bundle rendered
        without its record is not one)."""
        if entry.bundle:
            found = [RunHistory.read(Path(entry.bundle))]
        else:
            root = Path(entry.runs_root) if entry.runs_root else runs_dir()
            found = [r for r in RunHistory(root).records() if r.run_name == entry.name]
        return next((r for r in found if r is not None and r.created >= entry.started
                     and r.path.is_file()), None)

    def _adopt(self, entry: QueueEntry, record: RunRecord) -> str:
        """A run a queue process that ended started: stopped when it was cancelled, else
        followed by a watcher (when none follows it)."""
        from dtgui.launch.start.pipeline import reattach
        from dtgui.launch.start.watcher import start_watcher, watcher_pid

        try:
            if entry.state == CANCELLED:
                controller = reattach(record)
                controller.request_stop()
                controller.wait(STOP_SECONDS)
                return "cancelled, stopped"
            if watcher_pid(record) is None:
                start_watcher(record, None, entry.max_restarts)
            return "it runs, followed by its watcher"
        except Exception as exc:  # noqa: BLE001 - the run is the history's: the Runs page reaches it
            return f"reattach to it from the Runs page ({first_line(exc)})"

    def _wait_again(self, entry: QueueEntry) -> None:
        change_queue(self.folder, lambda entries: [
            with_state(e, WAITING, started=0.0) if e.id == entry.id else e for e in entries])

    def _drop(self, entry: QueueEntry) -> None:
        change_queue(self.folder, lambda entries: [e for e in entries if e.id != entry.id])

    def _fail(self, entry: QueueEntry, error: str) -> None:
        log.warning("%s could not start: %s", entry.name, error)
        change_queue(self.folder, lambda entries: [
            with_state(e, FAILED, error=error, waits_for="") if e.id == entry.id else e
            for e in entries])

    # -- a look ----------------------------------------------------------------------------
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
            try:
                why = self.waits_for(entry)
            except QueueError as exc:  # it can never start: the next goes on
                self._fail(entry, str(exc))
                self.again = True
                return True
            except Exception as exc:  # recorded with the run it concerns
                log.exception("%s: asking what it waits for failed", entry.name)
                self._fail(entry, first_line(exc))
                self.again = True
                return True
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
                    entry = with_state(entry, STARTING, waits_for="", started=time.time())
                    picked.append(entry)
                elif entry.waiting and entry.id in found:
                    entry = replace(entry, waits_for=found[entry.id])
                out.append(entry)
            return out

        change_queue(self.folder, note)
        return picked[0] if picked else None

    def targets(self, entry: QueueEntry) -> tuple[Plan, list[Target], Bundle | None]:
        """The entry's plan, targets and bundle (None: a plan to render); QueueError says
        why it cannot start."""
        if entry.bundle:
            bundle, targets = open_bundle(entry.bundle)
            return bundle.plan, targets, bundle
        try:
            plan = Plan.from_dict(entry.plan)
        except (ValueError, TypeError, KeyError) as exc:
            raise QueueError(f"its plan cannot be read ({first_line(exc)})") from None
        return plan, entry_targets(plan, self._job(entry)), None

    def waits_for(self, entry: QueueEntry) -> str:
        """What the entry waits for now ("": it may start). QueueError: it cannot start
        (a machine removed, or one whose GPUs cannot be read: unreachable; a bundle gone or
        damaged)."""
        plan, targets, _ = self.targets(entry)
        runs = active_run_plans()
        reasons = []
        for target in targets:
            if driver_for(target).whole_run:
                continue
            if plan.on_gpu or target.gpus:
                report = self.prober.report(target.name)
                if report.error and not report.gpus:
                    raise QueueError(f"the GPUs of {target.label} cannot be read "
                                     f"({report.error})")
                why = self.prober.taken(target.name, target.gpus or None, report)
            else:
                key = LOCAL_MACHINE if target.is_local else target.name
                other = next((p.run_name for p in runs if key in p.machine_names), "")
                why = f"run {other} on {target.label}" if other else ""
            if why:
                reasons.append(why)
        return "; ".join(reasons)

    @staticmethod
    def _job(entry: QueueEntry) -> TargetJob | None:
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
        leaves the queue (or stays, could not start, with the cause)."""
        from dtgui.launch.runs.policy import RunPolicy

        # its GPUs held from now (sweeps and the wizard read the register), until its
        # record holds them
        holds = HoldRegister(entry.name)
        try:
            plan, targets, bundle = self.targets(entry)
            for i, target in enumerate(targets):
                if not driver_for(target).whole_run:
                    holds.hold(i, target.name, target.gpus, run=entry.name)
            policy = RunPolicy(max_restarts=entry.max_restarts)
            if bundle is not None:
                controller = self.launch_bundle(bundle, targets, policy=policy)
            else:
                controller = self.launch(
                    plan, Path(entry.runs_root) if entry.runs_root else runs_dir(),
                    targets=targets, policy=policy, keep_ports=False)
        except Exception as exc:  # noqa: BLE001 - whatever it is, it concerns this run alone
            if self._cancelled(entry):
                self._drop(entry)
            else:
                self._fail(entry, first_line(exc))
            self.again = True
            return
        finally:
            holds.close()
        log.info("%s started: %s", entry.name, controller.bundle.path)
        self._started(entry, controller)

    def _cancelled(self, entry: QueueEntry) -> bool:
        with locked_queue(self.folder):
            return any(e.id == entry.id and e.state == CANCELLED
                       for e in read_queue(self.folder))

    def _started(self, entry: QueueEntry, controller: RunController) -> None:
        """The run started: stopped when it was cancelled during its launch, else handed to
        a watcher (it keeps its policy); it leaves the queue."""
        from dtgui.launch.start.watcher import start_watcher

        try:
            if self._cancelled(entry):
                log.info("%s was cancelled while it started: stopping it", entry.name)
                controller.request_stop()
                controller.wait(STOP_SECONDS)
                return
            controller.detach()
            # still training (not ended before the detach): a watcher keeps its policy
            if controller.record is not None and controller.state is RunState.DETACHED:
                try:
                    start_watcher(controller.record, None, entry.max_restarts)
                except OSError as exc:
                    log.warning("%s runs without a watcher (%s): reattach to it from the "
                                "Runs page.", entry.name, exc)
        finally:
            self._drop(entry)


def waits_now(entry: QueueEntry, folder: Path | None = None) -> str:
    """What a queued run waits for now, as the queue's process finds it ("": nothing, it
    starts at the next look): a run ahead of it, or its machines' runs."""
    folder = folder or queue_dir()
    with locked_queue(folder):
        entries = read_queue(folder)
    index = next((i for i, e in enumerate(entries) if e.id == entry.id), None)
    first = ahead_of(entries, index) if index is not None else None
    if first is not None:
        return f"{first.name} (ahead of it) to start first"
    queue = RunQueue(folder)
    try:
        return queue.waits_for(entry)
    except QueueError as exc:
        return f"nothing: it cannot start ({exc})"
    finally:
        queue.prober.close()


def noted(queued: QueuedRun, folder: Path | None = None) -> QueuedRun:
    """A run just queued (`enqueue`, `enqueue_bundle`) with what it waits for written into
    the queue at once, by the queue's process's own test (`waits_now`), so that no view has
    to guess before the process's first look."""
    folder = folder or queue_dir()
    entry = queued.entry
    try:
        why = waits_now(entry, folder)
    except Exception:  # it is queued: the process's next look notes it
        log.exception("%s: asking what it waits for failed", entry.name)
        return queued
    written: list[QueueEntry] = []

    def note(entries: list[QueueEntry]) -> list[QueueEntry]:
        out = []
        for one in entries:
            # not when the process has looked (or started it) meanwhile: its word is newer
            if one.id == entry.id and one.waiting and not one.waits_for:
                one = replace(one, waits_for=why)
                written.append(one)
            out.append(one)
        return out

    change_queue(folder, note)
    return QueuedRun(written[0], queued.position) if written else queued


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
