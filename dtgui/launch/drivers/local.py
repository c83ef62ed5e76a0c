"""This machine as a target: its tasks are processes started here (`LocalExecutor`).

It is checked only when other machines take part (versions must agree, ports be found) or a
user's script is looked at, and nothing is copied to it: the bundle is here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.machines.registry import MachineRegistry
from dtgui.core.plans.plan import LOCAL_MACHINE
from dtgui.core.runs.records import MachineRecord
from dtgui.launch.drivers.processes import ProcessDriver
from dtgui.launch.exec.executor import Executor
from dtgui.launch.exec.local_exec import LocalExecutor
from dtgui.launch.launch_state import Launch
from dtgui.launch.targets import LOCAL_KIND, Target

if TYPE_CHECKING:
    from dtgui.remote.connection import SSHClient
    from dtgui.remote.connector import Connector

KIND = LOCAL_KIND


def local_target(python: str = "", gpus: tuple[int, ...] = (), address: str = "") -> Target:
    """This machine (`python`: "" = this process's interpreter)."""
    return Target(LOCAL_MACHINE, None, python, address, gpus, kind=KIND)


def local_executor(bundle: Bundle, python: str) -> Executor:
    """The executor of a bundle's tasks on this machine."""
    return LocalDriver().executor(local_target(python), bundle, str(bundle.path))


class LocalDriver(ProcessDriver):
    kind = KIND
    imports_tf = False  # this machine's TensorFlow is the one the bundle pins

    def checks(self, launch: Launch, target: Target) -> bool:
        return len(launch.targets) > 1 or launch.script is not None

    def executor(self, target: Target, bundle: Bundle, run_dir: str, *,
                 connector: Connector | None = None, client: SSHClient | None = None,
                 dir_ready: bool = False) -> Executor:
        tasks = [t for t in bundle.plan.tasks if t.machine_name == target.name]
        return LocalExecutor(bundle, tasks, target.interpreter)

    def reattach(self, rec: MachineRecord, registry: MachineRegistry | None) -> Target:
        return local_target(rec.python, address=rec.address)
