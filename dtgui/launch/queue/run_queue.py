"""Single runs that wait for their GPUs or machines ("Launch when free", docs/gui.md): the
sweeps' test of what is free, their holds and their detached process, with a single run as an
entry.

`enqueue(plan, job=..., max_restarts=...)` puts a placed plan at the end of the queue
(`dtgui.core.runs.queue_file`, `<data dir>/queue/queue.json`) and makes sure the queue's process
runs:

    python -m dtgui.launch.queue.run_queue_process FOLDER

(`dtgui.launch.runs.detached`, as a sweep's queue and the run watcher are; it outlives dtgui, its
log in `FOLDER/queue.log`). That process (`dtgui.launch.queue.run_queue_process`, `RunQueue`) looks
at the queue every few seconds: in order, each waiting entry whose GPUs or machines no entry
ahead of it wants and which are free (the sweeps' test, `sweep_slots.GpuProber`: no other process on the GPU, not given to a dtgui run,
not held by a sweep's trial; a run on the CPU waits for the dtgui runs on its machines; a
batch scheduler's job never waits here: its scheduler queues it) is launched through the one
pipeline (`launch_plan`), then handed to a run watcher (`dtgui.launch.start.watcher`) and leaves
the queue: it is a run of the history, running, reattached as any run started while dtgui
was closed. What each entry waits for is written back for the Runs page. When nothing waits,
the process ends; `resume_queue()` starts it again when entries wait and none runs (after a
reboot).

`enqueue_bundle(bundle)` queues an exported bundle the same way (`dtgui queue add BUNDLE`):
it is started as it is, through `launch_bundle`. A queued run that cannot start (its model
file or script gone, a damaged bundle, a machine removed or unreachable, a port taken) ends
"could not start" with the cause in words, and the queue goes on with the next.

`queued_runs()` lists the entries with their position and what they wait for,
`cancel_queued(id)` removes one (a run whose launch is under way is marked cancelled: the
queue's process stops it as soon as it has started), `move_queued(id, by)` reorders; an
entry is named by its id or its run's name. Each reads and writes the file under a lock; a
damaged file raises `QueueError` (what to do) and is never written over. `resume_queue()`,
called by every dtgui entry (the app's Runs page, `dtgui queue`, `dtgui run`), starts the
queue's process when runs wait or a launch was left unsettled by a process that ended.

Blocks (files, processes): not on a UI thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from dtgui.core.bundles.bundle import Bundle, BundleError
from dtgui.core.machines.registry import MachineRegistry
from dtgui.core.plans.plan import LOCAL_MACHINE, Plan, is_local_machine
from dtgui.core.runs.queue_file import (
    CANCELLED,
    EVERY_GPU,
    FAILED,
    STARTING,
    QueueEntry,
    QueueError,
    entries_text,
    moved,
    position,
    read_entries,
    with_state,
)
from dtgui.core.runs.records import RunHistory
from dtgui.core.runs.run_state import RunState
from dtgui.core.settings import atomic_write_text, data_dir
from dtgui.core.target_job import TargetJob
from dtgui.launch.drivers import (
    Refused,
    bundle_targets,
    chosen_targets,
    driver_for,
    local_target,
)
from dtgui.launch.runs.detached import Detached
from dtgui.launch.targets import Target

MODULE = "dtgui.launch.queue.run_queue_process"
QUEUE_DIR = "queue"
QUEUE_FILE = "queue.json"
LOCK_FILE = "queue.lock"
QUEUE_PROCESS = Detached(MODULE, "queue.pid", "queue.log")


TRAINED = (RunState.FINISHED, RunState.STOPPED)  # a bundle's run that trained: never queued again
FREE_TEXT = "nothing: its machines are free, it starts in a few seconds"


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
        if self.entry.state == CANCELLED:
            return "cancelled: stopped as soon as its launch ends"
        # written when it was queued (`noted`), then at each look of the queue's process:
        # every view (the Runs page, `dtgui queue`, `dtgui queue add`) reads this one text
        return self.entry.waits_for or FREE_TEXT


# -- the file, under its lock ----------------------------------------------------------------
@contextlib.contextmanager
def locked_queue(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK_FILE, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_queue(folder: Path) -> list[QueueEntry]:
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


def change_queue(folder: Path, change: Callable[[list[QueueEntry]], list[QueueEntry]]
            ) -> list[QueueEntry]:
    with locked_queue(folder):
        entries = change(read_queue(folder))
        _write(folder, entries)
        return entries


# -- the API ---------------------------------------------------------------------------------
def entry_targets(plan: Plan, job: TargetJob | None) -> list[Target]:
    """The targets of a queued run (the wizard's choice: `chosen_targets`); QueueError
    says why they cannot be made (a machine no longer registered, a job no driver knows)."""
    machines = {m.name: m for m in MachineRegistry().machines()} \
        if any(not is_local_machine(n) for n in plan.machine_names) or job is not None else {}
    try:  # a plan not placed runs here, as `launch_plan` places it
        return chosen_targets(plan, machines, job) or [local_target()]
    except KeyError as exc:
        raise QueueError(f"the machine {exc.args[0]} is not registered any more (add it "
                         "again on the Machines panel, then queue the run again)") from None
    except Refused as exc:
        raise QueueError(str(exc)) from None


def open_bundle(path: str | Path) -> tuple[Bundle, list[Target]]:
    """A queued bundle and its targets; QueueError says why it cannot start (it is gone or
    damaged, its run already runs, its target cannot be made)."""
    try:
        bundle = Bundle.open(Path(path))
        record = RunHistory.read(bundle.path)
        if record is not None and record.is_active:
            raise QueueError(f"its run in {bundle.path} already runs (state {record.state})")
        if record is not None and record.state in TRAINED:  # started again, it would train
            # over the same folder's checkpoints and events
            raise QueueError(
                f"its run in {bundle.path} already ran (state {record.state}): to train it "
                f"again from the start, write a new bundle of it (dtgui runs export "
                f"{bundle.path} NEWDIR) and queue that; to train on from its last checkpoint, "
                f"dtgui resume {bundle.path}")
        return bundle, bundle_targets(bundle)
    except (BundleError, Refused, ValueError, TypeError, KeyError) as exc:
        raise QueueError(str(exc).strip() or repr(exc)) from None


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


def enqueue(plan: Plan, *, job: TargetJob | None = None, max_restarts: int = 0,
            runs_root: Path | None = None, folder: Path | None = None,
            python: str = "") -> QueuedRun:
    """Queue the placed `plan` (on the target of `job`, what a wizard box made, when given)
    to start when its GPUs and machines are free; its entry and position. Starts the queue's
    process when none runs. QueueError: the queue file is damaged, or the run's targets
    cannot be made."""
    folder = folder or queue_dir()
    try:
        targets = entry_targets(plan, job)
    except QueueError as exc:
        raise QueueError(f"{plan.run_name} cannot be queued: {exc}") from None
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
    entries = change_queue(folder, lambda entries: [*entries, entry])
    resume_queue(folder, python)
    return QueuedRun(entry, len(entries))


def enqueue_bundle(path: Path, *, max_restarts: int = 0, folder: Path | None = None,
                   python: str = "") -> QueuedRun:
    """Queue an exported bundle (`dtgui export`) to start as it is, in its own directory,
    when its machines are free; its entry and position. QueueError: the bundle cannot
    start (said why), or the queue file is damaged."""
    folder = folder or queue_dir()
    try:
        bundle, targets = open_bundle(path)
    except QueueError as exc:
        raise QueueError(f"{path} cannot be queued: {exc}") from None
    entry = QueueEntry(id=f"q{uuid.uuid4().hex[:8]}", plan=bundle.plan.to_dict(),
                       max_restarts=max_restarts, queued=time.time(),
                       claims=claims_of(bundle.plan, targets),
                       bundle=str(bundle.path.absolute()))

    def add(entries: list[QueueEntry]) -> list[QueueEntry]:
        twin = next((e for e in entries if e.bundle == entry.bundle and e.state != FAILED),
                    None)
        if twin is not None:  # one folder holds one run at a time
            raise QueueError(f"{path} is queued already, as {twin.id} ({twin.name}).")
        return [*entries, entry]

    entries = change_queue(folder, add)
    resume_queue(folder, python)
    return QueuedRun(entry, len(entries))


def queued_runs(folder: Path | None = None) -> list[QueuedRun]:
    """Every queued run in order, with its position; QueueError for a damaged file."""
    folder = folder or queue_dir()
    with locked_queue(folder):
        entries = read_queue(folder)
    return [QueuedRun(e, i + 1) for i, e in enumerate(entries)]


def cancel_queued(entry_id: str, folder: Path | None = None) -> QueueEntry:
    """Take the run (its id or name) out of the queue; the entry cancelled. A run whose
    launch is under way is marked cancelled: the queue's process stops it as soon as it
    has started, and it leaves the queue then. QueueError when it started or left
    already."""
    cancelled: list[QueueEntry] = []

    def drop(entries: list[QueueEntry]) -> list[QueueEntry]:
        i = position(entries, entry_id)
        cancelled.append(entries[i])
        if entries[i].launching:
            return [*entries[:i], with_state(entries[i], CANCELLED), *entries[i + 1:]]
        return entries[:i] + entries[i + 1:]

    folder = folder or queue_dir()
    change_queue(folder, drop)
    resume_queue(folder)  # a launch its process left unsettled is settled now
    return cancelled[0]


def move_queued(entry_id: str, by: int, folder: Path | None = None) -> None:
    """Move the run `by` places (-1: one up, towards the front)."""
    change_queue(folder or queue_dir(), lambda entries: moved(entries, entry_id, by))


def queue_pid(folder: Path | None = None) -> int | None:
    return QUEUE_PROCESS.pid(folder or queue_dir())


def resume_queue(folder: Path | None = None, python: str = "") -> int | None:
    """Start the queue's process when runs wait, or a launch is unsettled (its process
    ended while it started a run), and none runs; its pid (None: nothing waits)."""
    folder = folder or queue_dir()
    with locked_queue(folder):  # the process decides to end under this lock too
        pid = QUEUE_PROCESS.pid(folder)
        if pid is not None or not any(e.waiting or e.launching for e in read_queue(folder)):
            return pid
        return QUEUE_PROCESS.start(folder, python=python)
