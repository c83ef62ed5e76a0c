"""SshExecutor: the tasks of one remote machine, over one SSH connection (the process
executor over `SshHost`).

* prepare: the bundle is copied with SFTP to `remote_dir` as one archive and unpacked.
* start: one `sh -s` round trip starts every task of the machine detached (`setsid nohup`,
  stdin /dev/null, output to its log), each in its own session; the pids come back.
* poll: one round trip per poll for all the machine's tasks (see `SshHost.read_tasks`);
  the remote clock's offset is tracked from it, to correct the events' times.
* signal: `kill -s SIG -- -PGID` for each task's process group.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable

import paramiko

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.plans.plan import TaskSpec
from dtgui.launch.exec.host import bundle_archive
from dtgui.launch.exec.process_exec import ProcessExecutor
from dtgui.launch.exec.ssh_host import POLL_TIMEOUT, Reconnect, SshHost

__all__ = ["POLL_TIMEOUT", "Reconnect", "SshExecutor", "bundle_archive", "remote_run_dir"]


def remote_run_dir(home: str, run_id: str, machine: str) -> str:
    """Where a machine keeps a run's bundle: ~/.cache/dtgui/runs/<run>/<machine>/ (the
    machine part keeps apart machines that share one home directory, e.g. over NFS)."""
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", machine)[:60] or "machine"
    return posixpath.join(home, ".cache", "dtgui", "runs", run_id, slug)


class SshExecutor(ProcessExecutor):
    host: SshHost

    def __init__(self, name: str, bundle: Bundle, tasks: Iterable[TaskSpec], *,
                 reconnect: Reconnect, remote_dir: str, python: str = "python3",
                 client: paramiko.SSHClient | None = None) -> None:
        super().__init__(name, bundle, tasks, SshHost(name, reconnect, client), remote_dir,
                         python or "python3")

    @property
    def remote_dir(self) -> str:
        return self.directory

    def client(self) -> paramiko.SSHClient:
        """The connection (made again when it dropped)."""
        return self.host.client()
