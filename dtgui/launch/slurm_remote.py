"""RemoteSlurmExecutor: a Slurm job submitted on a cluster's login node over SSH.

The same job as `SlurmExecutor` (sbatch, squeue/scontrol, scancel) over an `SshHost` on the
login node: its commands run there, the bundle goes to the cluster's shared filesystem (the
run directory under the user's home, made by the launch's check step) as one archive over
SFTP, and each poll reads every task's exit code and new event and log bytes there in one
round trip, mirrored into the local bundle. The connection is made again when it drops (the
job does not depend on it).
"""

from __future__ import annotations

from collections.abc import Iterable

import paramiko

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.plans.plan import TaskSpec
from dtgui.launch.exec.ssh_host import Reconnect, SshHost
from dtgui.launch.slurm_exec import SlurmExecutor


class RemoteSlurmExecutor(SlurmExecutor):
    host: SshHost

    def __init__(self, name: str, bundle: Bundle, tasks: Iterable[TaskSpec], *,
                 reconnect: Reconnect, run_dir: str,
                 client: paramiko.SSHClient | None = None) -> None:
        host = SshHost(name, reconnect, client)
        super().__init__(name, bundle, tasks, host, run_dir, host)

    def client(self) -> paramiko.SSHClient:
        """The connection to the login node (made again when it dropped)."""
        return self.host.client()
