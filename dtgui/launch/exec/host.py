"""The host layer: a machine the executors run tasks on, this one or one over SSH, alike.

A `Host` runs commands (it is a `CommandRunner`), starts tasks detached in the task wrapper
(`dtgui.worker.layout.WRAPPER`), signals their process groups, reads the new bytes of the
tasks' files from byte offsets with their liveness and exit codes in one call, and copies
files. The executors are written once over it: the process executor (tasks as detached
process groups: `dtgui.launch.exec.process_exec`) and a kind's own (a batch scheduler's, in its
package). `LocalHost` (here) reads files and /proc directly and never starts a shell to poll; `SshHost` (`dtgui.launch.exec.ssh_host`) sends the fixed scripts of
`dtgui.launch.exec.remote_scripts` over one connection (paramiko is imported only there).

Directories are strings: this machine's paths or a remote machine's posix paths. Every
call blocks (run it on a background thread).
"""

from __future__ import annotations

import abc
import contextlib
import os
import posixpath
import shutil
import signal as signals
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.plans.plan import LOCAL_MACHINE
from dtgui.core.runs.liveness import GroupFacts, Member, parse_stat
from dtgui.core.runs.records import RECORD_NAME
from dtgui.launch.exec.remote_scripts import PollOutput
from dtgui.worker import layout
from dtgui.worker.machine_probe import port_is_free

CopyProgress = Callable[[int, int], None]  # (bytes copied, bytes in all)
LOCAL_MAX_CHUNK = 16 * 1024 * 1024  # bytes of one file read per poll on this machine
MAX_CHUNK = 4 * 1024 * 1024  # ... on another machine (one round trip carries them all)


@dataclass(frozen=True)
class TaskRead:
    """What to read of one task: its process group's liveness (0: none to look at) and its
    events and log from these byte offsets."""

    stem: str
    pgid: int = 0
    events_offset: int = 0
    log_offset: int = 0


class Host(abc.ABC):
    """A machine that runs a run's tasks."""

    mirrors = False  # the files live on another machine: copied into the local bundle
    max_chunk = LOCAL_MAX_CHUNK  # the most bytes of one file one read returns
    # what a call raises when the machine cannot be reached (the tasks keep running)
    failures: tuple[type[BaseException], ...] = (OSError,)

    def __init__(self, name: str) -> None:
        self.name = name

    @abc.abstractmethod
    def run(self, argv: Sequence[str], timeout: float, *, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> tuple[int, bytes, bytes]:
        """Run argv on the machine: (exit code, stdout, stderr) (a `CommandRunner`)."""

    @abc.abstractmethod
    def read_tasks(self, directory: str, reads: Sequence[TaskRead]) -> PollOutput:
        """The states of the tasks' process groups (read first, so a task seen dead has all
        its bytes in this read or earlier ones), their exit codes, and the new bytes of
        their events and logs (at most `max_chunk` each; a file shorter than its offset is
        reported in `truncated`). Raises one of `failures`."""

    @abc.abstractmethod
    def read_tail(self, directory: str, name: str, limit: int) -> bytes:
        """The last `limit` bytes of a file (b"": none there)."""

    def write_file(self, path: str, data: bytes) -> None:
        """Write `data` to the file `path` (absolute; its folder exists)."""
        code, _, err = self.run(["sh", "-c", 'cat > "$1"', "sh", path], 15.0, stdin=data)
        if code != 0:
            raise OSError(f"could not write {path}: {err.decode('utf-8', 'replace').strip()}")

    @abc.abstractmethod
    def remove(self, directory: str, names: Sequence[str]) -> None:
        """Delete these files of `directory` (those there)."""

    def remove_tree(self, directory: str) -> None:
        """Delete a run's copy: `directory` (absolute) and everything in it, as a launch that
        did not start removes the directory it made. Raises when it cannot (CommandFailed
        with the reason, or the connection's error)."""
        from dtgui.remote.commands import remove_run_dir

        remove_run_dir(self, directory)

    @abc.abstractmethod
    def prepare_dir(self, directory: str, archive: bytes | None, *, make_dir: bool = True,
                    progress: CopyProgress | None = None) -> None:
        """Make the bundle ready in `directory`: copied there as `archive` and unpacked (a
        machine that has the bundle already ignores it), with the tasks' output dirs."""

    @abc.abstractmethod
    def start_tasks(self, directory: str, python: str, stems: Sequence[str]) -> dict[str, int]:
        """Start each task in the wrapper, detached in a session of its own, from
        `directory` with PYTHON=`python`; returns stem -> process group."""

    @abc.abstractmethod
    def groups(self, pgids: Sequence[int]) -> GroupFacts:
        """The machine's boot id and the processes of each of these process groups (what
        tells whether a recorded task is still there: `GroupFacts.left`)."""

    @abc.abstractmethod
    def disk_space(self, directory: str) -> tuple[int, int]:
        """(bytes available, bytes in all) of the filesystem holding `directory`."""

    @abc.abstractmethod
    def signal_groups(self, pgids: Sequence[int], sigs: Sequence[int]) -> None:
        """Send each of `sigs`, in order, to each process group."""

    @abc.abstractmethod
    def held_ports(self, ports: Sequence[int], python: str) -> tuple[list[int], str]:
        """The ports another process holds, and why they could not be checked ("")."""

    @abc.abstractmethod
    def download_tree(self, directory: str, local: Path,
                      skip_prefixes: Iterable[str] = ()) -> int:
        """Copy the machine's `directory` into `local` (files copied)."""

    @abc.abstractmethod
    def upload_tree(self, local: Path, directory: str) -> None:
        """Replace the machine's `directory` by a copy of `local` (when it is there)."""

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """Release connections; the tasks keep running."""


def bundle_archive(bundle: Bundle) -> bytes:
    """What is copied to another machine: the bundle minus the record and the output."""
    from dtgui.remote.transfer import make_archive  # paramiko only where one is remote

    return make_archive(bundle.path, skip=[RECORD_NAME, layout.OUTPUT_DIR],
                        empty_dirs=[layout.OUTPUT_DIR, *layout.TASK_DIRS])


def group_states(pgids: Iterable[int]) -> dict[int, list[str]]:
    """Process group -> the states (R, S, T, Z, ...) of its processes, from /proc."""
    wanted = set(pgids)
    found: dict[int, list[str]] = {p: [] for p in wanted}
    if not wanted:
        return found
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(os.path.join(entry.path, "stat"), "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 2:
            with contextlib.suppress(ValueError):
                pgid = int(fields[2])
                if pgid in wanted:
                    found[pgid].append(fields[0].decode())
    return found


BOOT_ID = "/proc/sys/kernel/random/boot_id"


def read_groups(pgids: Iterable[int]) -> GroupFacts:
    """This machine's `GroupFacts` for these process groups, from /proc."""
    wanted = set(pgids)
    facts = GroupFacts(members={p: [] for p in wanted})
    with contextlib.suppress(OSError):
        facts.boot = Path(BOOT_ID).read_text(encoding="ascii").strip()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(os.path.join(entry.path, "stat"), "rb") as f:
                found = parse_stat(f.read())
        except OSError:
            continue
        if found is not None and found[2] in wanted:
            facts.members[found[2]].append(Member(found[0], found[1], found[3]))
    return facts


FULL_BYTES = 1024 * 1024  # less free than this: a checkpoint or an event cannot be written


def full_output(host: Host, directory: str) -> str:
    """The run's output directory on `host` when the disk holding it is full ("" = it is
    not, or it cannot be told: a task's failure is then reported as it is)."""
    output = posixpath.join(directory, layout.OUTPUT_DIR) if host.mirrors else \
        str(Path(directory) / layout.OUTPUT_DIR)
    errors: tuple[type[BaseException], ...] = (*host.failures, ValueError)
    try:
        available, _ = host.disk_space(output)
    except errors:
        return ""
    return output if available < FULL_BYTES else ""


def this_process() -> str:
    """This process's identity on this machine: "PID/BOOT_ID/START_TICKS"."""
    pid = os.getpid()
    with contextlib.suppress(OSError):
        found = parse_stat(Path(f"/proc/{pid}/stat").read_bytes())
        boot = Path(BOOT_ID).read_text(encoding="ascii").strip()
        if found is not None and boot:
            return f"{pid}/{boot}/{found[3]}"
    return ""


def process_left(identity: str) -> bool:
    """Whether the process of `identity` (`this_process` when it ran) is still there."""
    pid_text, _, rest = identity.partition("/")
    try:
        found = parse_stat(Path(f"/proc/{pid_text}/stat").read_bytes())
        boot = Path(BOOT_ID).read_text(encoding="ascii").strip()
    except OSError:
        return False
    return found is not None and found[1] not in ("Z", "X") and f"{boot}/{found[3]}" == rest


def read_from(path: str | Path, offset: int, limit: int) -> tuple[bytes, int | None]:
    """Up to `limit` bytes of a file from `offset`, and its size when it is shorter than
    `offset` (it was replaced: read it from the start), else None."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(limit)
            if data or not offset:
                return data, None
            size = os.fstat(f.fileno()).st_size  # nothing new: was it replaced?
            return b"", (size if size < offset else None)
    except FileNotFoundError:
        return b"", (0 if offset > 0 else None)


def read_exit_code(path: str | Path) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


class LocalHost(Host):
    """This machine: files and /proc read directly, tasks as `Popen` children (their exit
    codes come from `wait` too)."""

    def __init__(self, name: str = LOCAL_MACHINE) -> None:
        super().__init__(name)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}  # stem -> the wrapper started here

    def run(self, argv: Sequence[str], timeout: float, *, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> tuple[int, bytes, bytes]:
        from dtgui.remote.commands import LocalRunner  # paramiko only where one is remote

        return LocalRunner().run(argv, timeout, stdin=stdin, env=env)

    def read_tasks(self, directory: str, reads: Sequence[TaskRead]) -> PollOutput:
        codes = {stem: proc.poll() for stem, proc in self.procs.items()}  # liveness first
        out = PollOutput(states=group_states(r.pgid for r in reads if r.pgid), complete=True)
        root = Path(directory)
        for read in reads:
            stem = read.stem
            states = out.states.get(read.pgid, [])
            if read.pgid and stem in codes and codes[stem] is None and \
                    all(s == "Z" for s in states):
                # a child not reaped yet runs, whatever /proc showed a moment earlier
                states = out.states[read.pgid] = [*states, "R"]
            code = codes.get(stem)
            if code is None and not (read.pgid and any(s != "Z" for s in states)):
                code = read_exit_code(root / layout.exit_file(stem))  # only once it ended
            out.exits[stem] = code
            for which, name, offset in (("ev", layout.events_file(stem), read.events_offset),
                                        ("log", layout.log_file(stem), read.log_offset)):
                data, shorter = read_from(root / name, offset, self.max_chunk)
                if shorter is not None:
                    out.truncated[(stem, which)] = shorter
                elif data:
                    out.data[(stem, which)] = (offset, data)
        return out

    def read_tail(self, directory: str, name: str, limit: int) -> bytes:
        try:
            with open(Path(directory) / name, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - limit))
                return f.read(limit)
        except FileNotFoundError:
            return b""

    def remove(self, directory: str, names: Sequence[str]) -> None:
        for name in names:
            (Path(directory) / name).unlink(missing_ok=True)

    def prepare_dir(self, directory: str, archive: bytes | None, *, make_dir: bool = True,
                    progress: CopyProgress | None = None) -> None:
        for sub in layout.TASK_DIRS:  # the bundle is here already
            (Path(directory) / sub).mkdir(parents=True, exist_ok=True)

    def start_tasks(self, directory: str, python: str, stems: Sequence[str]) -> dict[str, int]:
        self.prepare_dir(directory, None)
        env = {**os.environ, "PYTHON": python}
        started: dict[str, int] = {}
        try:
            for stem in stems:
                started[stem] = self._start(Path(directory), stem, env)
        except OSError:
            self.signal_groups(list(started.values()), [signals.SIGKILL])
            raise
        return started

    def _start(self, root: Path, stem: str, env: dict[str, str]) -> int:
        (root / layout.exit_file(stem)).unlink(missing_ok=True)
        log = open(root / layout.log_file(stem), "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(layout.wrapper_argv(stem), cwd=root, env=env,
                                    stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()
        self.procs[stem] = proc
        (root / layout.pid_file(stem)).write_text(f"{proc.pid}\n", encoding="utf-8")
        return proc.pid

    def groups(self, pgids: Sequence[int]) -> GroupFacts:
        self.reap()  # a child of this process that ended is not left
        return read_groups(pgids)

    def disk_space(self, directory: str) -> tuple[int, int]:
        found = os.statvfs(directory)
        return found.f_bavail * found.f_frsize, found.f_blocks * found.f_frsize

    def reap(self) -> None:
        """Collect the exit statuses of ended children (no zombies are left)."""
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0)

    def signal_groups(self, pgids: Sequence[int], sigs: Sequence[int]) -> None:
        for pgid in pgids:
            for sig in sigs:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, sig)

    def held_ports(self, ports: Sequence[int], python: str) -> tuple[list[int], str]:
        return [p for p in ports if not port_is_free(p)], ""

    def download_tree(self, directory: str, local: Path,
                      skip_prefixes: Iterable[str] = ()) -> int:
        source, skipped = Path(directory), tuple(skip_prefixes)
        if not source.is_dir() or source.resolve() == local.resolve():
            return 0
        copied = 0

        def ignore(_dir: str, names: list[str]) -> list[str]:
            return [n for n in names if skipped and n.startswith(skipped)]

        shutil.copytree(source, local, ignore=ignore, dirs_exist_ok=True)
        for _, _, files in os.walk(local):
            copied += len(files)
        return copied

    def upload_tree(self, local: Path, directory: str) -> None:
        target = Path(directory)
        if target.resolve() == local.resolve():
            return
        shutil.rmtree(target, ignore_errors=True)
        if local.is_dir():
            shutil.copytree(local, target)
