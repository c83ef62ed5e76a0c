"""RemoteSlurmExecutor: a Slurm job submitted on a cluster's login node over SSH.

The same job as `SlurmExecutor` (sbatch, squeue/scontrol, scancel, through an `SshRunner`
on the login node); the bundle goes to the cluster's shared filesystem (the run directory
under the user's home, made by the launch's check step) over SFTP, and each poll reads every
task's exit code and new event and log bytes there in one round trip (the same poll script
as `SshExecutor`), mirrored into the local bundle. The connection is made again when it
drops (the job does not depend on it).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence

import paramiko

from dtgui.core.bundle import Bundle
from dtgui.core.plan import TaskSpec
from dtgui.launch.executor import MAX_CHUNK
from dtgui.launch.remote_scripts import POLL_SCRIPT, parse_poll
from dtgui.launch.slurm_exec import SlurmExecutor, TaskFiles
from dtgui.launch.ssh_exec import POLL_TIMEOUT, Reconnect, SshExecutor
from dtgui.remote.commands import SshRunner, run_bytes, run_script_bytes
from dtgui.remote.connection import ConnectError
from dtgui.remote.transfer import CopyProgress

UNPACK = ('cd "$1" && tar -xzf .bundle.tar.gz && rm -f .bundle.tar.gz '
          '&& mkdir -p output/logs output/pids')


class _LoginNode:
    """A CommandRunner on the login node that reconnects when the connection dropped."""

    def __init__(self, ssh: SshExecutor) -> None:
        self.ssh = ssh

    def run(self, argv: Sequence[str], timeout: float, *, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> tuple[int, bytes, bytes]:
        try:
            return SshRunner(self.ssh.client()).run(argv, timeout, stdin=stdin, env=env)
        except (ConnectError, paramiko.SSHException, OSError, EOFError):
            self.ssh.close()
            raise


class RemoteSlurmExecutor(SlurmExecutor):
    mirrors = True

    def __init__(self, name: str, bundle: Bundle, tasks: Iterable[TaskSpec], *,
                 reconnect: Reconnect, run_dir: str, client: object | None = None) -> None:
        tasks = list(tasks)
        # the connection, the copy of the bundle and the model's copy back: as for SSH tasks
        self.ssh = SshExecutor(name, bundle, tasks, reconnect=reconnect, remote_dir=run_dir,
                               client=client)  # type: ignore[arg-type]
        super().__init__(name, bundle, tasks, _LoginNode(self.ssh), run_dir)

    @property
    def archive(self) -> bytes | None:
        return self.ssh.archive

    @archive.setter
    def archive(self, data: bytes | None) -> None:
        self.ssh.archive = data

    @property
    def dir_ready(self) -> bool:
        return self.ssh.dir_ready

    @dir_ready.setter
    def dir_ready(self, ready: bool) -> None:
        self.ssh.dir_ready = ready

    def prepare(self, progress: CopyProgress | None = None) -> None:
        """The bundle onto the shared filesystem: one archive over SFTP, unpacked there."""
        self.ssh.prepare(progress)
        code, _, err = run_bytes(self.ssh.client(), ["sh", "-c", UNPACK, "sh", self.run_dir],
                                 60)
        if code != 0:
            raise ConnectError(f"unpacking the bundle in {self.run_dir} on {self.name} failed: "
                               f"{err.decode('utf-8', 'replace').strip()}")

    def _clear_exit_codes(self) -> None:
        paths = [posixpath.join(self.run_dir, "output", "pids", f"{t.file_stem}.exit")
                 for t in self.tasks]
        self.runner.run(["rm", "-f", "--", *paths], 30)

    def _read_files(self) -> dict[str, TaskFiles]:
        args = [self.run_dir, str(MAX_CHUNK)]
        for task in self.tasks:
            tid = task.task_id
            args += [task.file_stem, "0", str(self._events[tid].offset),
                     str(self._logs[tid].offset)]
        _, out, err = run_script_bytes(self.ssh.client(), POLL_SCRIPT, args, POLL_TIMEOUT)
        parsed = parse_poll(out)
        if not parsed.complete:
            raise ConnectError(f"reading the run's files failed: {parsed.error or err.decode()}")
        found: dict[str, TaskFiles] = {}
        for task in self.tasks:
            tid, stem = task.task_id, task.file_stem
            files = TaskFiles(parsed.exits.get(stem))
            for which, buf in (("ev", self._events[tid]), ("log", self._logs[tid])):
                if (stem, which) in parsed.truncated:
                    buf.offset = 0
                offset, data = parsed.data.get((stem, which), (buf.offset, b""))
                files.behind |= len(data) >= MAX_CHUNK
                taken = buf.take(data, offset)
                if which == "ev":
                    files.raw_events = taken
                else:
                    files.raw_log = taken
            found[tid] = files
        return found

    def _job_log_text(self) -> str:
        path = posixpath.join(self.run_dir, "output", "logs", f"slurm-{self.job_id}.log")
        code, out, _ = self.runner.run(["tail", "-n", "40", "--", path], 30)
        return out.decode("utf-8", "replace") if code == 0 else ""

    def fetch_output(self, name: str) -> int:
        return self.ssh.fetch_output(name)

    def close(self) -> None:
        self.ssh.close()
