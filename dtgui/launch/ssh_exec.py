"""SshExecutor: the tasks of one remote machine, over one SSH connection.

* prepare: the bundle is copied with SFTP to `remote_dir` (one `mkdir -p`, then the files).
* start: one `sh -s` round trip starts every task of the machine detached (`setsid nohup`,
  stdin /dev/null, output to its log), each in its own session; the pids come back.
* poll: one round trip per poll for all the machine's tasks: the states of their processes
  (from /proc), their exit codes, and the new bytes of their events and logs from the byte
  offsets read so far.
* signal: `kill -s SIG -- -PGID` for each task's process group.

A lost connection is re-opened on the next call (the tasks do not depend on it). Secrets are
never on a command line, in the environment or in a file: `reconnect` (a
`dtgui.remote.connector.Connector` bound to the machine) holds them in memory only.
"""

from __future__ import annotations

import posixpath
import re
import signal as signals
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import paramiko

from dtgui.core.bundle import Bundle
from dtgui.core.events import parse_events
from dtgui.core.plan import TaskSpec
from dtgui.core.runs import RECORD_NAME
from dtgui.launch.executor import (
    MAX_CHUNK,
    WRAPPER,
    Executor,
    MachinePoll,
    TaskPoll,
    split_log,
)
from dtgui.launch.remote_scripts import (
    POLL_SCRIPT,
    SIGNAL_SCRIPT,
    START_SCRIPT,
    parse_pids,
    parse_poll,
)
from dtgui.remote.commands import SshRunner, run_bytes, run_script_bytes
from dtgui.remote.connection import ConnectError
from dtgui.remote.probe import ask
from dtgui.remote.transfer import (
    CopyProgress,
    download_tree,
    make_archive,
    upload_bytes,
    upload_tree,
)

POLL_TIMEOUT = 4.0
CLOCK_SHIFT_MIN = 0.5  # seconds of clock difference worth correcting on the time axis
Reconnect = Callable[[], paramiko.SSHClient]  # a new connection to the executor's machine


def remote_run_dir(home: str, run_id: str, machine: str) -> str:
    """Where a machine keeps a run's bundle: ~/.cache/dtgui/runs/<run>/<machine>/ (the
    machine part keeps apart machines that share one home directory, e.g. over NFS)."""
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", machine)[:60] or "machine"
    return posixpath.join(home, ".cache", "dtgui", "runs", run_id, slug)


def bundle_archive(bundle: Bundle) -> bytes:
    """What is copied to every machine: the bundle minus the record and the output."""
    return make_archive(bundle.path, skip=[RECORD_NAME, "output"],
                        empty_dirs=["output", "output/logs", "output/pids"])


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace").strip()


class SshExecutor(Executor):
    mirrors = True

    def __init__(self, name: str, bundle: Bundle, tasks: Iterable[TaskSpec], *,
                 reconnect: Reconnect, remote_dir: str, python: str = "python3",
                 client: paramiko.SSHClient | None = None) -> None:
        super().__init__(name, bundle, tasks)
        self._reconnect = reconnect
        self.remote_dir = remote_dir
        self.python = python or "python3"
        self._client = client
        self._lock = threading.Lock()
        self._offsets: list[float] = []
        self.clock_offset = 0.0  # remote clock minus this machine's (seconds)
        self.archive: bytes | None = None  # the bundle as .tar.gz (made once, shared)
        self.dir_ready = False  # the launch check made remote_dir already

    @property
    def directory(self) -> str:
        return self.remote_dir

    # -- connection ------------------------------------------------------------------------
    def client(self) -> paramiko.SSHClient:
        with self._lock:
            client = self._client
            transport = client.get_transport() if client is not None else None
            if client is None or transport is None or not transport.is_active():
                if client is not None:
                    client.close()
                self._client = None
                client = self._reconnect()
                transport = client.get_transport()
                if transport is not None:
                    transport.set_keepalive(5)
                self._client = client
            return client

    def _drop(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def close(self) -> None:
        self._drop()

    def _script(self, script: str, args: list[str], timeout: float) -> tuple[int, bytes, bytes]:
        try:
            return run_script_bytes(self.client(), script, args, timeout)
        except (ConnectError, paramiko.SSHException, OSError, EOFError):
            self._drop()
            raise

    # -- executor --------------------------------------------------------------------------
    def prepare(self, progress: CopyProgress | None = None) -> None:
        """Copy the bundle: one .tar.gz over SFTP into the run directory (which the launch
        check made); START_SCRIPT unpacks it. One file, not one SFTP exchange per file."""
        if self.archive is None:
            self.archive = bundle_archive(self.bundle)
        if not self.dir_ready:
            run_bytes(self.client(), ["mkdir", "-p", "--", self.remote_dir], 30)
        upload_bytes(self.client(), self.archive,
                     posixpath.join(self.remote_dir, ".bundle.tar.gz"), progress)

    def busy_ports(self) -> list[str]:
        ports = [t.port for t in self.tasks if t.port]
        if not ports:
            return []
        args = ["facts"] + [a for p in ports for a in ("--test-port", str(p))]
        answer = ask(SshRunner(self.client()), self.python, args, 30)
        if answer.data is None:
            return [f"Could not check the ports on {self.name}: {answer.detail}"]
        checked = answer.data.get("ports") or {}
        busy = [int(p) for p in (*checked.get("busy", {}), *checked.get("errors", {}))]
        return [f"Port {t.port} on {self.name} (task {t.task_id}) is in use by another process: "
                "choose other ports (or stop that process)." for t in self.tasks if t.port in busy]

    def start(self) -> dict[str, int]:
        stems = [t.file_stem for t in self.tasks]
        code, out, err = self._script(START_SCRIPT, [self.remote_dir, self.python, WRAPPER,
                                                     *stems], 60)
        pids = parse_pids(_text(out))
        by_stem = {t.file_stem: t.task_id for t in self.tasks}
        self.pids.update({by_stem[s]: p for s, p in pids.items() if s in by_stem})
        missing = [t.task_id for t in self.tasks if t.task_id not in self.pids]
        if code != 0 or missing:
            detail = _text(out + err)[-400:] or f"exit code {code}"
            raise ConnectError(f"Starting {', '.join(missing) or 'the tasks'} on {self.name} "
                               f"failed: {detail}")
        return {t: self.pids[t] for t in self.task_ids}

    def poll(self) -> MachinePoll:
        args = [self.remote_dir, str(MAX_CHUNK)]
        for task in self.tasks:
            tid = task.task_id
            args += [task.file_stem, str(self.pids.get(tid, 0)), str(self._events[tid].offset),
                     str(self._logs[tid].offset)]
        sent = time.time()
        try:
            code, out, err = self._script(POLL_SCRIPT, args, POLL_TIMEOUT)
        except (ConnectError, paramiko.SSHException, OSError, EOFError) as exc:
            return MachinePoll(self.name, error=str(exc) or type(exc).__name__)
        received = time.time()
        parsed = parse_poll(out)
        if not parsed.complete:
            detail = parsed.error or _text(err)[-300:] or f"exit code {code}"
            return MachinePoll(self.name, error=f"polling failed: {detail}")
        self._track_clock(parsed.now, sent, received)
        shift = self.clock_offset if abs(self.clock_offset) >= CLOCK_SHIFT_MIN else 0.0
        result = MachinePoll(self.name)
        for task in self.tasks:
            tid, stem = task.task_id, task.file_stem
            pgid = self.pids.get(tid, 0)
            live = [s for s in parsed.states.get(pgid, []) if s != "Z"] if pgid else []
            poll = TaskPoll(tid, alive=bool(live), stopped="T" in live or "t" in live)
            if not poll.alive:
                poll.exit_code = parsed.exits.get(stem)
            for which, buf in (("ev", self._events[tid]), ("log", self._logs[tid])):
                if (stem, which) in parsed.truncated:
                    buf.offset = 0  # the file was replaced: read it again
                offset, data = parsed.data.get((stem, which), (buf.offset, b""))
                result.behind |= len(data) >= MAX_CHUNK
                taken = buf.take(data, offset)
                if which == "ev":
                    poll.raw_events, poll.events = taken, parse_events(taken, shift)
                else:
                    poll.raw_log, poll.log_lines = taken, split_log(taken)
            result.tasks[tid] = poll
        return result

    def _track_clock(self, remote_now: float | None, sent: float, received: float) -> None:
        if remote_now is None or received - sent > 1.0:
            return
        self._offsets = [*self._offsets[-8:], remote_now - (sent + received) / 2]
        self.clock_offset = statistics.median(self._offsets)

    def signal(self, *sigs: int, tasks: Iterable[str] | None = None) -> None:
        chosen = set(self.pids) if tasks is None else set(tasks)
        pgids = [str(p) for t, p in self.pids.items() if t in chosen and p > 0]
        if not pgids:
            return
        names = ",".join(signals.Signals(sig).name.removeprefix("SIG") for sig in sigs)
        self._script(SIGNAL_SCRIPT, [names, *pgids], 15)

    def fetch_output(self, name: str) -> int:
        return download_tree(self.client(), posixpath.join(self.remote_dir, "output", name),
                             self.bundle.output / name)

    # -- checkpoints (restart) -----------------------------------------------------------
    def download_checkpoints(self, local_dir: Path) -> int:
        """Copy this machine's output/checkpoints (the chief's) to `local_dir`."""
        import shutil

        shutil.rmtree(local_dir, ignore_errors=True)
        return download_tree(self.client(), posixpath.join(self.remote_dir, "output",
                                                           "checkpoints"), local_dir,
                             skip_prefixes=["tmp-worker"])

    def upload_checkpoints(self, local_dir: Path) -> None:
        target = posixpath.join(self.remote_dir, "output", "checkpoints")
        run_bytes(self.client(), ["rm", "-rf", "--", target], 30)
        if local_dir.is_dir():
            upload_tree(self.client(), local_dir, target)

    def sync_checkpoints_from(self, source: Executor) -> None:
        if source is self:
            return
        local = self.bundle.output / "checkpoints"
        if isinstance(source, SshExecutor):
            source.download_checkpoints(local)
        self.upload_checkpoints(local)
