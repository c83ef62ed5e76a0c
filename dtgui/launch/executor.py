"""The executor interface: how the run policy starts, watches and signals the tasks
of one machine. `LocalExecutor` (this machine: processes) and `SshExecutor` (a remote
machine: SSH + SFTP) implement it; `RunController` holds the policy, written once.

Every task is started the same way on every machine, from its bundle directory, detached in
a session of its own (so it survives the GUI and a dropped connection):

    sh -c WRAPPER dtgui-task <stem>     (stdin /dev/null, stdout+stderr >> output/logs/<stem>.log)

The wrapper writes its pid (= the process group) to output/pids/<stem>.pid, runs
tasks/<stem>.sh, and writes the task's exit code to output/pids/<stem>.exit. It traps
TERM/INT/HUP only to outlive the group's SIGTERM long enough to record the code; the task
itself gets default signal actions.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dtgui.core.bundle import Bundle
from dtgui.core.events import Event, LineBuffer
from dtgui.core.plan import TaskSpec

if TYPE_CHECKING:  # paramiko is imported only where a machine is remote
    from dtgui.remote.transfer import CopyProgress

WRAPPER = ('trap : TERM INT HUP; echo "$$" > "output/pids/$1.pid"; sh "tasks/$1.sh"; c=$?; '
           'echo "$c" > "output/pids/$1.exit"; exit "$c"')
MAX_CHUNK = 4 * 1024 * 1024  # bytes of one remote file read per poll
LOCAL_MAX_CHUNK = 16 * 1024 * 1024  # ... of a file on this machine


@dataclass
class TaskPoll:
    """What one poll saw of a task. Liveness is read before the files, so a task seen dead
    has all its events in `events` (or in earlier polls)."""

    task: str
    alive: bool = True
    stopped: bool = False  # a process of the task is stopped (SIGSTOP): it is hung
    queued: bool = False  # not started yet: waiting in a batch queue (not hung)
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

    def __init__(self, name: str, bundle: Bundle, tasks: Iterable[TaskSpec]) -> None:
        self.name = name  # the machine ("local" for this machine)
        self.bundle = bundle
        self.tasks = list(tasks)
        self.pids: dict[str, int] = {}  # task id -> process group id
        self.job_id = ""  # the batch job holding the tasks, where a scheduler queues them
        self._events = {t.task_id: LineBuffer() for t in self.tasks}
        self._logs = {t.task_id: LineBuffer() for t in self.tasks}

    @property
    def task_ids(self) -> list[str]:
        return [t.task_id for t in self.tasks]

    def reset_offsets(self) -> None:
        """Read every file from the start again (reattach: nothing is lost)."""
        for buf in (*self._events.values(), *self._logs.values()):
            buf.offset = 0

    def adopt(self, pids: dict[str, int]) -> None:
        """Follow tasks started earlier (by another session) instead of starting them."""
        self.pids.update({t: p for t, p in pids.items() if t in self._events and p > 0})

    @property
    def directory(self) -> str:
        """The bundle directory on this executor's machine."""
        return str(self.bundle.path)

    @abc.abstractmethod
    def prepare(self, progress: CopyProgress | None = None) -> None:
        """Make the bundle available on the machine (copy it; `progress` hears how far)."""

    @abc.abstractmethod
    def busy_ports(self) -> list[str]:
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

    def fetch_output(self, name: str) -> int:
        """Copy `output/<name>` of this machine into the local bundle (files copied); the
        tasks on this machine already write there."""
        return 0

    def sync_checkpoints_from(self, source: Executor) -> None:  # noqa: B027 - optional
        """Make the chief's checkpoints (on `source`) visible here (restart of a run)."""

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """Release connections; the tasks keep running."""
