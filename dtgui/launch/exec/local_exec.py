"""LocalExecutor: the tasks of this machine, as processes in sessions of their own (the
process executor over `LocalHost`).

Tasks this process started are `Popen` children (their exit codes come from `wait`); tasks
adopted from a run record (a new GUI session) are followed through /proc and their exit
files. Polling reads the files and /proc directly: no process is started to poll.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.plans.plan import LOCAL_MACHINE, TaskSpec
from dtgui.launch.exec.host import LocalHost
from dtgui.launch.exec.process_exec import ProcessExecutor


class LocalExecutor(ProcessExecutor):
    host: LocalHost
    poll_seconds = start_poll_seconds = 0.2

    def __init__(self, bundle: Bundle, tasks: Iterable[TaskSpec] | None = None,
                 python: str | None = None, name: str = LOCAL_MACHINE) -> None:
        super().__init__(name, bundle, bundle.plan.tasks if tasks is None else tasks,
                         LocalHost(name), str(bundle.path), python or sys.executable)

    @property
    def procs(self) -> dict[str, subprocess.Popen[bytes]]:
        """The wrappers this process started (by task file stem)."""
        return self.host.procs

    def local_pgids(self) -> list[int]:
        return list(self.pids.values())

    def reap(self) -> None:
        self.host.reap()
