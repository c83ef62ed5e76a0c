"""The pool's driver: a run in a pool is copied into the pool's folder and its tasks run from
there as this machine's processes (`PoolExecutor`, over a host that mirrors the copy's files
into the run's own folder, as a remote machine's are)."""

from __future__ import annotations

import io
import shutil
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dtgui.core.bundles.bundle import Bundle, add_task_modules, render_bundle
from dtgui.core.machines.registry import Machine, MachineRegistry, RemoteFacts
from dtgui.core.plans.placement import place_local
from dtgui.core.plans.plan import Plan, TaskSpec
from dtgui.core.runs.records import MachineRecord, RunRecord
from dtgui.core.target_job import TargetJob
from dtgui.launch.drivers.base import Driver, Refused, remove_through_host
from dtgui.launch.exec.executor import Executor
from dtgui.launch.exec.host import CopyProgress, LocalHost
from dtgui.launch.exec.process_exec import ProcessExecutor
from dtgui.launch.launch_state import Launch
from dtgui.launch.targets import Target
from dtgui_pool.job import JOB_FILE, KIND, TASK_MODULE, PoolError, PoolJob, pool_settings

if TYPE_CHECKING:
    from dtgui.remote.commands import CommandRunner
    from dtgui.remote.connection import SSHClient
    from dtgui.remote.connector import Connector


class PoolHost(LocalHost):
    """The pool's folder: this machine's files, kept apart from the run's own folder (the
    controller mirrors the tasks' files into it)."""

    mirrors = True

    def prepare_dir(self, directory: str, archive: bytes | None, *, make_dir: bool = True,
                    progress: CopyProgress | None = None) -> None:
        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        if archive is not None:
            with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
                tar.extractall(root, filter="data")
        super().prepare_dir(directory, None)


class PoolExecutor(ProcessExecutor):
    """The tasks of a run in a pool: its bundle copied into the pool (again at each start,
    so that a resumed run's bundle is the one that runs), then started from there."""

    host: PoolHost

    def __init__(self, name: str, bundle: Bundle, tasks: list[TaskSpec], directory: str,
                 python: str) -> None:
        super().__init__(name, bundle, tasks, PoolHost(name), directory, python)

    def start(self) -> dict[str, int]:
        self.archive = None
        self.prepare()
        return super().start()


@dataclass
class PoolFacts:
    """What the Machines panel shows of a pool: its runs."""

    runs: int
    tf_cell = "in the pool"
    tf_detail = "TensorFlow of this machine"
    tf_tip = "A pool's tasks run on this machine."

    def gpus_cell(self) -> str:
        return f"{self.runs} run(s)"

    def gpus_tip(self) -> str:
        return f"{self.runs} run(s) in the pool"

    def detail_lines(self) -> list[str]:
        return [f"<b>Pool</b> {self.runs} run(s)"]


def pool_target(machine: Machine, job: PoolJob) -> Target:
    return Target(machine.name, machine, job.python or machine.python, job=job, kind=KIND)


def _job(target: Target) -> PoolJob:
    assert isinstance(target.job, PoolJob), f"{target.name} has no pool job"
    return target.job


def _folder(machine: Machine | None) -> Path:
    settings = pool_settings(machine)
    if settings is None:
        raise Refused(f"{machine.name if machine else 'this machine'} is no pool")
    return Path(settings.folder).expanduser()


def place_in_pool(plan: Plan, pool: str) -> Plan:
    """The plan's tasks on this machine (free ports), each in the pool."""
    placed = place_local(plan)
    tasks = tuple(TaskSpec(t.type, t.index, t.host, t.port, (), pool) for t in placed.tasks)
    return placed.with_changes(tasks=tasks, machines={})


class PoolDriver(Driver):
    kind = KIND
    whole_run = "a run in a pool runs all its tasks there; it cannot take other machines too."
    errors = (PoolError,)
    probes = True
    probe_text = "counting the pool's runs"

    def check(self, launch: Launch, target: Target) -> list[str]:
        folder = _folder(target.machine)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return [f"{target.name}: the pool's folder {folder} cannot be made "
                    f"({exc.strerror})"]
        launch.dirs[target.name] = str(folder / launch.record.run_id)
        return []

    def place(self, launch: Launch) -> Plan:
        (target,) = launch.targets
        return place_in_pool(launch.plan, target.name)

    def render(self, launch: Launch, target: Target, bundle: Bundle) -> None:
        _job(target).save(bundle.path)
        add_task_modules(bundle, self.task_modules())

    def task_modules(self) -> dict[str, Path]:
        return {TASK_MODULE: Path(__file__).with_name("task.py")}

    def executor(self, target: Target, bundle: Bundle, run_dir: str, *,
                 connector: Connector | None = None, client: SSHClient | None = None,
                 dir_ready: bool = False) -> Executor:
        tasks = [t for t in bundle.plan.tasks if t.machine_name == target.name]
        return PoolExecutor(target.name, bundle, tasks, run_dir, target.interpreter)

    def started(self, executor: Executor) -> str:
        return f"in the pool {executor.name}"

    def reattach(self, rec: MachineRecord, registry: MachineRegistry | None) -> Target:
        found = registry.find(rec.name) if registry is not None else None
        machine = found or Machine.from_dict(rec.machine)
        return pool_target(machine, PoolJob(rec.name, rec.python))

    def target_of_job(self, job: TargetJob, machines: Mapping[str, Machine]) -> Target | None:
        if not isinstance(job, PoolJob):
            return None
        machine = machines.get(job.pool)
        if machine is None or pool_settings(machine) is None:
            raise Refused(f"No pool is registered as {job.pool!r}.")
        return pool_target(machine, job)

    def trial_job(self, plan: Plan, machine: Machine) -> PoolJob:
        return PoolJob(machine.name)

    def trial_target_text(self, machine: Machine) -> str:
        return f"pool {machine.name} (a job a trial)"

    def job_from_dict(self, data: dict[str, Any]) -> PoolJob:
        return PoolJob.from_dict(data)

    def export(self, plan: Plan, destination: Path,
               job: TargetJob) -> tuple[Bundle, str] | None:
        if not isinstance(job, PoolJob):
            return None
        bundle = render_bundle(place_in_pool(plan, job.pool), destination)
        job.save(bundle.path)
        add_task_modules(bundle, self.task_modules())
        return bundle, f"in the pool's folder:\n  cd {bundle.path}\n  bash run.sh"

    def bundle_job(self, path: Path) -> PoolJob | None:
        return PoolJob.load(path)

    def bundle_target(self, bundle: Bundle,
                      registry: MachineRegistry | None) -> Target | None:
        job = PoolJob.load(bundle.path)
        if job is None:
            return None
        machine = (registry or MachineRegistry()).find(job.pool)
        if pool_settings(machine) is None or machine is None:
            raise PoolError(f"no pool is registered as {job.pool!r}")
        return pool_target(machine, job)

    def remove_copy(self, target: Target, bundle: Bundle, directory: str,
                    connector: Connector | None) -> None:
        executor = self.executor(target, bundle, directory)
        assert isinstance(executor, PoolExecutor)
        remove_through_host(executor.host, directory)

    def cleanup(self, launch: Launch, target: Target) -> None:
        made = launch.dirs.get(target.name)
        if made:
            shutil.rmtree(made, ignore_errors=True)

    def probe_facts(self, machine: Machine, runner: CommandRunner, facts: RemoteFacts) -> None:
        folder = _folder(machine)
        facts.kind_facts = PoolFacts(len([p for p in folder.glob("*") if p.is_dir()]))

    def tracking_tags(self, record: RunRecord) -> dict[str, str]:
        pools = sorted({m.name for m in record.machines if m.kind == KIND})
        return {"dtgui.pool": ",".join(pools)}

    def tracking_files(self, root: Path) -> list[Path]:
        return [root / JOB_FILE]

    def resume_refusal(self) -> str:
        return "a run in a pool resumes in its pool."

