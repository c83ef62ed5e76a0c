"""Single runs that wait for their GPUs or machines ("Launch when free", docs/gui.md): the
sweeps' test of what is free, their holds and their detached process, with a single run as an
entry.

`enqueue(plan, job=..., max_restarts=...)` puts a placed plan at the end of the queue
(`dtgui.core.queue_file`, `<data dir>/queue/queue.json`) and makes sure the queue's process
runs:

    python -m dtgui.launch.run_queue FOLDER

(`dtgui.launch.detached`, as a sweep's queue and the run watcher are; it outlives dtgui, its
log in `FOLDER/queue.log`). That process looks at the queue every few seconds: in order, each
waiting entry whose GPUs or machines no entry ahead of it wants and which are free (the
sweeps' test, `sweep_slots.GpuProber`: no other process on the GPU, not given to a dtgui run,
not held by a sweep's trial; a run on the CPU waits for the dtgui runs on its machines; a
batch scheduler's job never waits here: its scheduler queues it) is launched through the one
pipeline (`launch_plan`), then handed to a run watcher (`dtgui.launch.watcher`) and leaves
the queue: it is a run of the history, running, reattached as any run started while dtgui
was closed. What each entry waits for is written back for the Runs page. When nothing waits,
the process ends; `resume_queue()` starts it again when entries wait and none runs (after a
reboot).

`queued_runs()` lists the entries with their position and what they wait for,
`cancel_queued(id)` removes one, `move_queued(id, by)` reorders. Each reads and writes the
file under a lock; a damaged file raises `QueueError` (what to do) and is never written over.

Blocks (files, processes; the process launches): not on a UI thread.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import logging
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from dtgui.core.machines import MachineRegistry
from dtgui.core.plan import LOCAL_MACHINE, Plan, is_local_machine
from dtgui.core.queue_file import (
    EVERY_GPU,
    FAILED,
    STARTING,
    QueueEntry,
    QueueError,
    ahead_of,
    entries_text,
    moved,
    position,
    read_entries,
    with_state,
)
from dtgui.core.run_state import RunState
from dtgui.core.settings import atomic_write_text, data_dir, runs_dir
from dtgui.launch.controller import LaunchError, RunController
from dtgui.launch.detached import Detached
from dtgui.launch.drivers import (
    Refused,
    chosen_targets,
    driver_for,
    job_readers,
    local_target,
)
from dtgui.launch.sweep_holds import HoldRegister
from dtgui.launch.sweep_slots import GpuProber, active_run_plans
from dtgui.launch.targets import Target

log = logging.getLogger("dtgui.queue")
MODULE = "dtgui.launch.run_queue"
QUEUE_DIR = "queue"
QUEUE_FILE = "queue.json"
LOCK_FILE = "queue.lock"
QUEUE_PROCESS = Detached(MODULE, "queue.pid", "queue.log")
POLL_SECONDS = 2.0


def queue_dir() -> Path:
    return data_dir() / QUEUE_DIR


@dataclass(frozen=True)
class QueuedRun:
    """An entry as the Runs page shows it."""

    entry: QueueEntry
    position: int  # 1 = the next to start

    @property
    def text(self) -> str:
        """What it waits for, in a few words."""
        if self.entry.state == FAILED:
            return f"could not start: {self.entry.error}"
        if self.entry.state == STARTING:
            return "starting"
        return self.entry.waits_for or "its turn (looked at every few seconds)"


# -- the file, under its lock ----------------------------------------------------------------
@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK_FILE, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read_queue(folder: Path) -> list[QueueEntry]:
    path = folder / QUEUE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise QueueError(f"The run queue {path} cannot be read ({exc}): check its "
                         "permissions; nothing was changed.") from exc
    return read_entries(text, str(path))


def _write(folder: Path, entries: Sequence[QueueEntry]) -> None:
    atomic_write_text(folder / QUEUE_FILE, entries_text(entries))


def _change(folder: Path, change: Callable[[list[QueueEntry]], list[QueueEntry]]
            ) -> list[QueueEntry]:
    with _locked(folder):
        entries = change(_read_queue(folder))
        _write(folder, entries)
        return entries


# -- the API ---------------------------------------------------------------------------------
def entry_targets(plan: Plan, job: object | None) -> list[Target]:
    """The targets of a queued run (the wizard's choice: `chosen_targets`); QueueError
    when they cannot be made (a machine no longer registered, a job no driver knows)."""
    machines = {m.name: m for m in MachineRegistry().machines()} \
        if any(not is_local_machine(n) for n in plan.machine_names) or job is not None else {}
    try:  # a plan not placed runs here, as `launch_plan` places it
        return chosen_targets(plan, machines, job) or [local_target()]
    except (Refused, KeyError) as exc:
        raise QueueError(f"{plan.run_name} cannot be queued: {exc}") from None


def claims_of(plan: Plan, targets: Sequence[Target]) -> tuple[tuple[str, int], ...]:
    """What a run takes while it runs: its GPUs (every GPU of a machine where it was given
    none, and every machine of a CPU run); a batch scheduler's job takes nothing here."""
    out: list[tuple[str, int]] = []
    for target in targets:
        if driver_for(target).whole_run:
            continue
        key = LOCAL_MACHINE if target.is_local else target.name
        out += [(key, g) for g in target.gpus] or [(key, EVERY_GPU)]
    return tuple(out)


def enqueue(plan: Plan, *, job: object | None = None, max_restarts: int = 0,
            runs_root: Path | None = None, folder: Path | None = None,
            python: str = "") -> QueuedRun:
    """Queue the placed `plan` (on the target of `job`, what a wizard box made, when given)
    to start when its GPUs and machines are free; its entry and position. Starts the queue's
    process when none runs. QueueError: the queue file is damaged, or the run's targets
    cannot be made."""
    folder = folder or queue_dir()
    targets = entry_targets(plan, job)
    job_data = None
    if job is not None:
        kind, to_dict = getattr(job, "kind", None), getattr(job, "to_dict", None)
        if not isinstance(kind, str) or to_dict is None:
            raise QueueError(f"{plan.run_name} cannot be queued: its job {job!r} cannot be "
                             "kept.")
        job_data = {"kind": kind, **to_dict()}
    entry = QueueEntry(id=f"q{uuid.uuid4().hex[:8]}", plan=plan.to_dict(), job=job_data,
                       max_restarts=max_restarts, runs_root=str(runs_root or ""),
                       queued=time.time(), claims=claims_of(plan, targets))
    entries = _change(folder, lambda entries: [*entries, entry])
    resume_queue(folder, python)
    return QueuedRun(entry, len(entries))


def queued_runs(folder: Path | None = None) -> list[QueuedRun]:
    """Every queued run in order, with its position; QueueError for a damaged file."""
    folder = folder or queue_dir()
    with _locked(folder):
        entries = _read_queue(folder)
    return [QueuedRun(e, i + 1) for i, e in enumerate(entries)]


def cancel_queued(entry_id: str, folder: Path | None = None) -> None:
    """Take the run out of the queue (QueueError when it started or left already)."""

    def drop(entries: list[QueueEntry]) -> list[QueueEntry]:
        i = position(entries, entry_id)
        if entries[i].state == STARTING:
            raise QueueError(f"{entries[i].name} is starting: stop it from the Runs page "
                             "once it runs.")
        return entries[:i] + entries[i + 1:]

    _change(folder or queue_dir(), drop)


def move_queued(entry_id: str, by: int, folder: Path | None = None) -> None:
    """Move the run `by` places (-1: one up, towards the front)."""
    _change(folder or queue_dir(), lambda entries: moved(entries, entry_id, by))


def queue_pid(folder: Path | None = None) -> int | None:
    return QUEUE_PROCESS.pid(folder or queue_dir())


def resume_queue(folder: Path | None = None, python: str = "") -> int | None:
    """Start the queue's process when runs wait and none runs; its pid (None: nothing
    waits)."""
    folder = folder or queue_dir()
    with _locked(folder):  # the process decides to end under this lock too
        pid = QUEUE_PROCESS.pid(folder)
        if pid is not None or not any(e.waiting for e in _read_queue(folder)):
            return pid
        return QUEUE_PROCESS.start(folder, python=python)


# -- the queue's process ---------------------------------------------------------------------
Launcher = Callable[..., RunController]


class RunQueue:
    """The loop of the queue's process: each look starts at most one run (the first that
    may), and writes what the others wait for."""

    def __init__(self, folder: Path, launch: Launcher | None = None) -> None:
        from dtgui.launch.pipeline import launch_plan

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
        _change(self.folder, lambda entries: [
            with_state(e, FAILED, error="the queue's process ended while it started this "
                       "run: see on the Runs page whether it runs, then cancel it here")
            if e.state == STARTING else e for e in entries])

    def look(self) -> bool:
        """One look; False when nothing waits any more (the process then ends)."""
        with _locked(self.folder):
            entries = _read_queue(self.folder)
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

        _change(self.folder, note)
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
        from dtgui.launch.policy import RunPolicy
        from dtgui.launch.watcher import start_watcher

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
            _change(self.folder, lambda entries: [
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
        _change(self.folder, lambda entries: [e for e in entries if e.id != entry.id])


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
