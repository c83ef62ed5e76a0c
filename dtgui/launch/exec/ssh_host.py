"""SshHost: a machine over one SSH connection, re-opened on the next call when it dropped
(the tasks do not depend on it).

Each call is one round trip: a fixed script of `dtgui.launch.exec.remote_scripts` on stdin of
`sh -s` with every value an argument (start, poll, signal), or a quoted argv. Files go with
SFTP (`dtgui.remote.transfer`). Secrets are never on a command line, in the environment or
in a file: `reconnect` (a `dtgui.remote.connector.Connector` bound to the machine) holds them
in memory only.
"""

from __future__ import annotations

import posixpath
import signal as signals
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import paramiko

from dtgui.core.runs.liveness import GroupFacts
from dtgui.launch.exec.host import MAX_CHUNK, CopyProgress, Host, TaskRead
from dtgui.launch.exec.remote_scripts import (
    GROUPS_SCRIPT,
    POLL_SCRIPT,
    SIGNAL_SCRIPT,
    START_SCRIPT,
    UNPACK_SCRIPT,
    PollOutput,
    parse_groups,
    parse_pids,
    parse_poll,
)
from dtgui.remote.commands import SshRunner, run_bytes, run_script_bytes
from dtgui.remote.connection import ConnectError
from dtgui.remote.probe import ask
from dtgui.remote.transfer import download_tree, upload_bytes, upload_tree
from dtgui.worker.layout import BUNDLE_ARCHIVE, WRAPPER

POLL_TIMEOUT = 4.0
Reconnect = Callable[[], paramiko.SSHClient]  # a new connection to the host's machine


def _decoded(data: bytes) -> str:
    return data.decode("utf-8", "replace").strip()


class SshHost(Host):
    mirrors = True
    max_chunk = MAX_CHUNK
    failures = (ConnectError, paramiko.SSHException, OSError, EOFError)

    def __init__(self, name: str, reconnect: Reconnect,
                 client: paramiko.SSHClient | None = None) -> None:
        super().__init__(name)
        self._reconnect = reconnect
        self._client = client
        self._lock = threading.Lock()  # guards _client and _closes, never held while connecting
        self._connecting = threading.Lock()  # one reconnect at a time
        self._closes = 0  # close() calls so far: a reconnect that overlapped one is dropped

    # -- the connection ----------------------------------------------------------------------
    def client(self) -> paramiko.SSHClient:
        with self._connecting:
            with self._lock:
                client = self._client
                transport = client.get_transport() if client is not None else None
                if client is not None and transport is not None and transport.is_active():
                    return client
                if client is not None:
                    client.close()
                self._client = None
                closes = self._closes
            # Connecting to a machine that does not answer blocks up to the connect timeout:
            # outside `_lock`, so that close() (a run's end) never waits for it.
            client = self._reconnect()
            transport = client.get_transport()
            if transport is not None:
                transport.set_keepalive(5)
            with self._lock:
                if self._closes == closes:
                    self._client = client
                    return client
            client.close()  # closed while connecting: the connection is not needed any more
            raise ConnectError(f"the connection to {self.name} was closed")

    def close(self) -> None:
        with self._lock:
            self._closes += 1
            if self._client is not None:
                self._client.close()
                self._client = None

    def run(self, argv: Sequence[str], timeout: float, *, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> tuple[int, bytes, bytes]:
        try:
            return SshRunner(self.client()).run(argv, timeout, stdin=stdin, env=env)
        except self.failures:
            self.close()
            raise

    def script(self, script: str, args: Sequence[str], timeout: float) -> tuple[int, bytes,
                                                                                bytes]:
        try:
            return run_script_bytes(self.client(), script, args, timeout)
        except self.failures:
            self.close()
            raise

    # -- the tasks ---------------------------------------------------------------------------
    def read_tasks(self, directory: str, reads: Sequence[TaskRead]) -> PollOutput:
        args = [directory, str(self.max_chunk)]
        for read in reads:
            args += [read.stem, str(read.pgid), str(read.events_offset), str(read.log_offset)]
        code, out, err = self.script(POLL_SCRIPT, args, POLL_TIMEOUT)
        parsed = parse_poll(out)
        if not parsed.complete:
            detail = parsed.error or _decoded(err)[-300:] or f"exit code {code}"
            raise ConnectError(f"polling failed: {detail}")
        return parsed

    def read_tail(self, directory: str, name: str, limit: int) -> bytes:
        code, out, _ = self.run(["tail", "-c", str(limit), "--",
                                 posixpath.join(directory, name)], 30)
        return out if code == 0 else b""

    def remove(self, directory: str, names: Sequence[str]) -> None:
        if names:
            self.run(["rm", "-f", "--", *(posixpath.join(directory, n) for n in names)], 30)

    def prepare_dir(self, directory: str, archive: bytes | None, *, make_dir: bool = True,
                    progress: CopyProgress | None = None) -> None:
        """One .tar.gz over SFTP into `directory` (made first unless `make_dir` is False:
        the launch check made it), unpacked there: one file, not one SFTP exchange a file."""
        if make_dir:
            run_bytes(self.client(), ["mkdir", "-p", "--", directory], 30)
        if archive is not None:
            upload_bytes(self.client(), archive, posixpath.join(directory, BUNDLE_ARCHIVE),
                         progress)
        code, out, err = self.script(UNPACK_SCRIPT, [directory], 60)
        if code != 0:
            raise ConnectError(f"unpacking the bundle in {directory} on {self.name} failed: "
                               f"{_decoded(out + err)[-400:] or f'exit code {code}'}")

    def start_tasks(self, directory: str, python: str, stems: Sequence[str]) -> dict[str, int]:
        code, out, err = self.script(START_SCRIPT, [directory, python, WRAPPER, *stems], 60)
        pids = {s: p for s, p in parse_pids(_decoded(out)).items() if s in stems}
        missing = [s for s in stems if s not in pids]
        if code != 0 or missing:
            detail = _decoded(out + err)[-400:] or f"exit code {code}"
            raise ConnectError(f"Starting {', '.join(missing) or 'the tasks'} on {self.name} "
                               f"failed: {detail}")
        return pids

    def groups(self, pgids: Sequence[int]) -> GroupFacts:
        code, out, err = self.script(GROUPS_SCRIPT, [str(p) for p in pgids], POLL_TIMEOUT)
        try:
            return parse_groups(_decoded(out), pgids)
        except ValueError as exc:
            raise ConnectError(f"reading the processes on {self.name} failed: "
                               f"{_decoded(err)[-300:] or f'exit code {code}'}") from exc

    def disk_space(self, directory: str) -> tuple[int, int]:
        code, out, err = self.run(["df", "-Pk", "--", directory], 30)
        lines = _decoded(out).splitlines()
        fields = lines[-1].split() if code == 0 and len(lines) > 1 else []
        if len(fields) < 4 or not (fields[1].isdigit() and fields[3].isdigit()):
            raise ValueError(f"df said: {_decoded(out + err)[-200:]}")
        return int(fields[3]) * 1024, int(fields[1]) * 1024

    def signal_groups(self, pgids: Sequence[int], sigs: Sequence[int]) -> None:
        groups = [str(p) for p in pgids if p > 0]
        if groups:
            names = ",".join(signals.Signals(sig).name.removeprefix("SIG") for sig in sigs)
            self.script(SIGNAL_SCRIPT, [names, *groups], 15)

    def held_ports(self, ports: Sequence[int], python: str) -> tuple[list[int], str]:
        args = ["facts"] + [a for p in ports for a in ("--test-port", str(p))]
        answer = ask(self, python, args, 30)
        if answer.data is None:
            return [], answer.detail
        checked = answer.data.get("ports") or {}
        return [int(p) for p in (*checked.get("busy", {}), *checked.get("errors", {}))], ""

    # -- files -------------------------------------------------------------------------------
    def download_tree(self, directory: str, local: Path,
                      skip_prefixes: Iterable[str] = ()) -> int:
        return download_tree(self.client(), directory, local, skip_prefixes=skip_prefixes)

    def upload_tree(self, local: Path, directory: str) -> None:
        self.run(["rm", "-rf", "--", directory], 30)
        if local.is_dir():
            upload_tree(self.client(), local, directory)
