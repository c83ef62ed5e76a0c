"""The executor interface: how the run policy starts, watches and signals the tasks
of one machine (`RunController` holds the policy, written once). The executors implement it,
each written once over the host layer (`dtgui.launch.exec.host`: this machine or one over SSH):
the process executor (`dtgui.launch.exec.process_exec`: `LocalExecutor`, and a kind's over its
host, e.g. the SSH machines') and a kind's own (a batch scheduler's, in its package).

Every task runs in the one task wrapper (`dtgui.worker.layout.WRAPPER`), from its bundle
directory: it writes its pid (= the process group) and, once the task ended, its exit code
where the bundle's layout says (`dtgui.worker.layout`), and its output goes to the task's
log. Reading what a task wrote since the last poll is written once here (`take_files`).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from dataclasses import dataclass, field

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.events import Event, LineBuffer, parse_events
from dtgui.core.plans.plan import TaskSpec
from dtgui.launch.exec.host import CopyProgress, TaskRead
from dtgui.launch.exec.remote_scripts import PollOutput
from dtgui.worker.layout import WRAPPER

__all__ = ["WRAPPER", "Executor", "MachinePoll", "TaskFiles",
           "TaskPoll", "mirror", "split_log"]


@dataclass
class TaskPoll:
    """What one poll saw of a task. Liveness is read before the files, so a task seen dead
    has all its events in `events` (or in earlier polls)."""

    task: str
    alive: bool = True
    stopped: bool = False  # a process of the task is stopped (SIGSTOP): it is hung
    queued: bool = False  # not started yet, or ended before its batch job: waiting (not hung)
    exit_code: int | None = None  # once it ended, when known
    events: list[Event] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list)
    raw_events: bytes = b""  # the complete lines behind `events` (mirrored locally)
    raw_log: bytes = b""


@dataclass
class MachinePoll:
    machine: str
    tasks: dict[str, TaskPoll] = field(default_factory=dict)
    error: str = ""  # the machine could not be polled (unreachable, ...)
    behind: bool = False  # a file had more to read than one poll takes: poll again at once
    note: str = ""  # what the machine says of its tasks now (a batch job waiting in its queue)


@dataclass
class TaskFiles:
    """What one read saw of a task's files."""

    exit_code: int | None = None  # None: not written
    raw_events: bytes = b""
    events: list[Event] = field(default_factory=list)
    raw_log: bytes = b""
    log_lines: list[str] = field(default_factory=list)
    behind: bool = False  # more to read than one read takes


def mirror(bundle: Bundle, task: TaskSpec, raw_events: bytes, raw_log: bytes) -> None:
    """Append a remote task's new events and log bytes to the local bundle's copies."""
    for path, data in ((bundle.events_file(task), raw_events), (bundle.log_file(task), raw_log)):
        if data:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "ab") as f:
                f.write(data)


def split_log(raw: bytes) -> list[str]:
    return raw.decode("utf-8", "replace").splitlines()


class Executor(abc.ABC):
    """Starts, watches and signals the tasks of one machine of a run."""

    mirrors = False  # True: the events/logs live elsewhere and are copied into the bundle
    # seconds between polls once its tasks train, and while they start (importing TensorFlow):
    # a poll of this machine is a /proc scan in this process, elsewhere a round trip
    poll_seconds = 0.5
    start_poll_seconds = 1.0

    def __init__(self, name: str, bundle: Bundle, tasks: Iterable[TaskSpec]) -> None:
        self.name = name  # the machine ("local" for this machine)
        self.bundle = bundle
        self.tasks = list(tasks)
        self.pids: dict[str, int] = {}  # task id -> process group id
        self.job_id = ""  # the batch job holding the tasks, where a scheduler queues them
        # where the bundle is copied (`mirrors`): the archive copied, made once and shared by
        # the machines of a launch; the launch check made the run directory already
        self.archive: bytes | None = None
        self.dir_ready = False
        self._events = {t.task_id: LineBuffer() for t in self.tasks}
        self._logs = {t.task_id: LineBuffer() for t in self.tasks}

    @property
    def task_ids(self) -> list[str]:
        return [t.task_id for t in self.tasks]

    def reset_offsets(self) -> None:
        """Read every file from the start again (reattach: nothing is lost)."""
        for buf in (*self._events.values(), *self._logs.values()):
            buf.offset = 0

    def read_on_from_bundle(self) -> None:
        """Read every file on from where the local bundle's copy of it ends (a resume: what
        was read before is in the bundle; a file the machine lacks is read from its start)."""
        for task in self.tasks:
            for buf, path in ((self._events[task.task_id], self.bundle.events_file(task)),
                              (self._logs[task.task_id], self.bundle.log_file(task))):
                try:
                    buf.offset = path.stat().st_size
                except OSError:
                    buf.offset = 0

    def adopt(self, pids: dict[str, int]) -> None:
        """Follow tasks started earlier (by another session) instead of starting them."""
        self.pids.update({t: p for t, p in pids.items() if t in self._events and p > 0})

    @property
    def directory(self) -> str:
        """The bundle directory on this executor's machine."""
        return str(self.bundle.path)

    def task_reads(self, pgids: bool = True) -> list[TaskRead]:
        """What the next read asks of every task: from the offsets read so far."""
        return [TaskRead(t.file_stem, self.pids.get(t.task_id, 0) if pgids else 0,
                         self._events[t.task_id].offset, self._logs[t.task_id].offset)
                for t in self.tasks]

    def take_files(self, seen: PollOutput, max_chunk: int,
                   shift: float = 0.0) -> dict[str, TaskFiles]:
        """Task id -> its exit code and the complete new lines of its files in `seen` (the
        offsets advance past them; a file replaced since is read from the start next time);
        `shift` corrects the events' times for the machine's clock."""
        found: dict[str, TaskFiles] = {}
        for task in self.tasks:
            tid, stem = task.task_id, task.file_stem
            files = TaskFiles(seen.exits.get(stem))
            for which, buf in (("ev", self._events[tid]), ("log", self._logs[tid])):
                if (stem, which) in seen.truncated:
                    buf.offset = 0
                offset, data = seen.data.get((stem, which), (buf.offset, b""))
                files.behind |= len(data) >= max_chunk
                taken = buf.take(data, offset)
                if which == "ev":
                    files.raw_events, files.events = taken, parse_events(taken, shift)
                else:
                    files.raw_log, files.log_lines = taken, split_log(taken)
            found[tid] = files
        return found

    @abc.abstractmethod
    def prepare(self, progress: CopyProgress | None = None) -> None:
        """Make the bundle available on the machine (copy it; `progress` hears how far)."""

    @abc.abstractmethod
    def port_conflicts(self) -> list[str]:
        """Sentences naming each task port on the machine that another process holds."""

    @abc.abstractmethod
    def start(self) -> dict[str, int]:
        """Start every task of this machine; returns task id -> process group id."""

    @abc.abstractmethod
    def poll(self) -> MachinePoll:
        """Liveness, then the new events and log lines of every task (one round trip)."""

    @abc.abstractmethod
    def signal(self, *sigs: int, tasks: Iterable[str] | None = None) -> None:
        """Send each of `sigs`, in order, to the process groups of these tasks (default:
        all)."""

    def put_output_file(self, name: str, data: bytes) -> None:  # noqa: B027 - optional
        """Write `output/<name>` of the bundle on this machine, where its tasks read it."""

    def read_output_file(self, name: str, limit: int) -> bytes:
        """The last `limit` bytes of `output/<name>` of the bundle on this machine (b"": none
        there, or this kind of machine keeps no such file)."""
        return b""

    def fetch_output(self, name: str) -> int:
        """Copy `output/<name>` of this machine into the local bundle (files copied); the
        tasks on this machine already write there."""
        return 0

    def sync_checkpoints_from(self, source: Executor) -> None:  # noqa: B027 - optional
        """Make the chief's checkpoints (on `source`) visible here (restart of a run)."""

    def put_checkpoints(self) -> None:  # noqa: B027 - optional
        """The local bundle's output/checkpoints copied to this machine (a resume)."""

    def put_task_files(self, task_ids: Iterable[str]) -> None:  # noqa: B027 - optional
        """The local bundle's copies of these tasks' events and logs written on this machine
        (a resume that moved them here): its files then hold the whole run, as a reattach
        reads them again."""

    def full_output(self) -> str:
        """Its output directory when the disk holding it is full ("" = not, or not known)."""
        return ""

    def identities(self) -> dict[str, str]:
        """Task -> its process group's identity once started (`GroupFacts.identity`), what
        the record keeps so that a reused id does not count ({}: its tasks are not process
        groups of dtgui's, or the machine did not answer)."""
        return {}

    def local_pgids(self) -> list[int]:
        """The process groups of its tasks that run on this machine (none elsewhere)."""
        return []

    def reap(self) -> None:  # noqa: B027 - no children of this process by default
        """Collect the exit statuses of this process's ended children (no zombies)."""

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """Release connections; the tasks keep running."""
