"""One launch in progress: its targets, and what each step found or made (the launch
pipeline's steps and the target drivers read and fill it)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.plans.placement import machine_key
from dtgui.core.plans.plan import Plan
from dtgui.core.runs.records import RunRecord
from dtgui.launch.checks.script_check import ScriptStudy
from dtgui.launch.runs.policy import RunPolicy
from dtgui.launch.runs.run_source import BundledRun
from dtgui.launch.targets import Target

if TYPE_CHECKING:  # paramiko is imported only when a step needs it (not for this machine)
    from dtgui.launch.checks.precheck import PythonCheck
    from dtgui.launch.exec.executor import Executor
    from dtgui.remote.connection import SSHClient
    from dtgui.remote.connector import Connector

LaunchProgress = Callable[[str, float], None]  # (what is happening, fraction done 0..1)


def unique_run_dir(root: Path, name: str) -> Path:
    candidate = root / name
    n = 2
    while candidate.exists():
        candidate = root / f"{name}-{n}"
        n += 1
    return candidate


def new_record(bundle_dir: Path, plan: Plan) -> RunRecord:
    """The run record of a run about to start: its id is unique across machines."""
    return RunRecord(run_id=f"{bundle_dir.name}-{secrets.token_hex(3)}", run_name=plan.run_name,
                     bundle=str(bundle_dir), strategy=plan.strategy, created=time.time())


def default_connector() -> Connector:
    from dtgui.remote.connector import Connector

    return Connector()


class UnknownMachine(ValueError):
    """A task is assigned to a machine that is not among the launch's targets."""


class Launch:
    """One launch in progress: its targets, and what each step found or made."""

    def __init__(self, plan: Plan, bundle_dir: Path, targets: Sequence[Target],
                 assignments: Mapping[str, str], connector: Connector | None,
                 policy: RunPolicy | None, progress: LaunchProgress | None,
                 keep_ports: bool, script: ScriptStudy | None) -> None:
        self.plan = plan
        self.assignments = {t: machine_key(m) for t, m in assignments.items()}
        used = list(dict.fromkeys(self.assignments.values()))
        by_name = {machine_key(t.name): t for t in targets}
        unknown = [m for m in used if m not in by_name]
        if unknown:
            raise UnknownMachine(f"No machine named {', '.join(unknown)} was chosen.")
        self.targets = [by_name[m] for m in used]
        self._connector = connector
        self.policy = policy
        self.progress = progress or (lambda _text, _fraction: None)
        self.keep_ports = keep_ports
        self.bundle_dir = bundle_dir
        self.record = new_record(bundle_dir, plan)  # its id names the remote directories
        self.script = script  # a user's own script, looked at
        self.clients: dict[str, SSHClient] = {}
        self.expected_tf: str | None = None  # the TensorFlow version every machine must have
        self.checks: dict[str, PythonCheck] = {}
        self.dirs: dict[str, str] = {}  # machine -> the run directory its check made there
        self.notes: list[str] = []  # what a check could not tell, shown in the run's log
        self.placed = plan
        self.bundle: Bundle | None = None
        self.executors: list[Executor] = []
        self.recorded = False
        self.controller: BundledRun | None = None  # the run's controller, once started
        self.timings: dict[str, float] = {}

    @property
    def connector(self) -> Connector:
        if self._connector is None:
            self._connector = default_connector()
        return self._connector

    @property
    def remote(self) -> list[Target]:
        return [t for t in self.targets if t.needs_connection]

    def task_count(self, target: Target) -> int:
        return sum(1 for m in self.assignments.values() if m == target.name)

    def wanted_ports(self, target: Target) -> list[int]:
        """The ports the plan gives this target's tasks (keep_ports), in task order."""
        if not self.keep_ports:
            return []
        return [t.port for t in self.plan.tasks
                if self.assignments.get(t.task_id) == target.name and t.port]

    def run_dir(self, target: Target) -> str:
        """The bundle directory on the target: the one its check made, else the bundle."""
        assert self.bundle is not None
        return self.dirs.get(target.name) or str(self.bundle.path)

    def close(self) -> None:
        for client in self.clients.values():
            client.close()
