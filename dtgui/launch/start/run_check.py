"""Whether a run recorded as running still has tasks: the one check every reader of a
"running" record makes (`dtgui resume`, `dtgui runs`, the Runs page, a reattach, the queue,
sweeps, the watcher), and the record of a run found without any as lost.

A record says running until the process that follows the run writes its end; a power cut, a
reboot, the OOM killer or a SIGKILL of every process leaves it saying so for good. Each task
is asked where it runs, through its target's driver (`Driver.tasks_left`): a process task by
its process group and the identity recorded when it started (the machine's boot id and the
group leader's start time: `dtgui.core.runs.liveness`), here from /proc and on another machine
through the host layer's fixed script; a scheduler's task by its job's state. The verdict:

    alive    a task may still run (the record is left as it is)
    gone     no task is left on any machine: the run is recorded as lost, with the step its
             events reached and its newest whole checkpoint, and can be resumed
    unknown  a machine could not be asked (unreachable, not connected for a list): said as
             such, never recorded as lost

Nothing is written while a task may still be alive, and the record is read again just before
it is written (its follower may have written its end meanwhile).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from dtgui.core.bundles.bundle import Bundle, BundleError
from dtgui.core.bundles.checkpoint_files import CHECKPOINTS_DIR, newest_checkpoint
from dtgui.core.machines.registry import MachineRegistry
from dtgui.core.runs.records import RunRecord, TaskRecord
from dtgui.core.runs.run_state import RunState
from dtgui.launch.drivers import Refused, driver_for, target_of_record
from dtgui.launch.exec.host import process_left

if TYPE_CHECKING:
    from dtgui.remote.connector import Connector


class Liveness(str, Enum):
    ALIVE = "alive"
    GONE = "gone"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class RunCheck:
    verdict: Liveness
    detail: str = ""  # unknown: which machine could not be asked, and why

    @property
    def text(self) -> str:
        """The verdict in words, as the command line says it (`dtgui runs show`)."""
        if self.verdict is Liveness.UNKNOWN:
            return f"unknown: {self.detail}" if self.detail else "unknown"
        return str(self.verdict.value)


def check_run(record: RunRecord, *, connector: Connector | None = None,
              registry: MachineRegistry | None = None, reach: bool = True) -> RunCheck:
    """Whether any task of `record` is left. `reach`: connect to the machines reached over
    SSH (with `connector`, default the session's); else their tasks are unknown."""
    recorded = record.tasks
    if not recorded and (not record.launcher or process_left(record.launcher)):
        return RunCheck(Liveness.UNKNOWN, "its launch is still under way")
    try:
        bundle = Bundle.open(Path(record.bundle))
    except BundleError as exc:
        return RunCheck(Liveness.UNKNOWN, f"its bundle cannot be read ({exc})")
    if not recorded:  # the launcher is gone: its tasks, were they started, by their pid files
        recorded = [TaskRecord(t.task_id, t.machine_name) for t in bundle.plan.tasks]
    unknown: list[str] = []
    for rec in record.machines:
        tasks = [t for t in recorded if t.machine == rec.name]
        if not tasks:
            continue
        try:
            target = target_of_record(rec, registry)
        except Refused as exc:
            unknown.append(f"{rec.name}: {exc}")
            continue
        driver = driver_for(target)
        client = None
        if target.needs_connection:
            if not reach or target.machine is None:
                unknown.append(f"{rec.name} was not asked")
                continue
            if connector is None:
                from dtgui.launch.launch_state import default_connector

                connector = default_connector()
            try:
                client = connector(target.machine)
            except Exception as exc:  # noqa: BLE001 - any failure to connect: not known
                unknown.append(f"{rec.name} cannot be reached ({exc})")
                continue
        executor = None
        try:
            executor = driver.executor(target, bundle, rec.dir, client=client,
                                       connector=connector if target.needs_connection
                                       else None, dir_ready=True)
            left = driver.tasks_left(executor, tasks)
        except Exception as exc:  # noqa: BLE001 - the machine did not answer: not known
            unknown.append(f"{rec.name} did not answer ({exc})")
            continue
        finally:
            if executor is not None:
                with contextlib.suppress(Exception):
                    executor.close()
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()
        if any(left.get(t.task, False) for t in tasks):
            return RunCheck(Liveness.ALIVE)
        if any(t.task not in left for t in tasks):
            unknown.append(f"{rec.name} cannot tell whether its tasks run")
    if unknown:
        return RunCheck(Liveness.UNKNOWN, "; ".join(unknown))
    return RunCheck(Liveness.GONE)


def lost_message(bundle: Path, step: int) -> str:
    """What the record of a lost run says: the step reached and where a resume goes on."""
    found = newest_checkpoint(bundle / "output" / CHECKPOINTS_DIR)
    where = f"its last whole checkpoint is at step {found.step}: resume it to go on from " \
        "there" if found.ok else "it has no whole checkpoint here: resuming starts at step 0"
    return (f"none of its processes is left (a crash, a reboot, the OOM killer or a kill "
            f"ended them) at step {step}; {where}")


def settle(record: RunRecord, *, connector: Connector | None = None,
           registry: MachineRegistry | None = None, reach: bool = True) -> RunCheck:
    """Check a record that says it runs; when none of its tasks is left, record it as lost
    (`record` is updated in place too). An ended record is returned as gone, unchanged."""
    if not record.is_active:
        return RunCheck(Liveness.GONE)
    check = check_run(record, connector=connector, registry=registry, reach=reach)
    if check.verdict is not Liveness.GONE:
        return check
    from dtgui.core.run_curves import bundle_curves  # numpy: only for a lost run

    step = bundle_curves(record.bundle).steps_done()  # read before: the window below is short
    message = lost_message(Path(record.bundle), step)
    try:
        fresh = RunRecord.load(Path(record.bundle))
    except (OSError, ValueError, TypeError, KeyError):
        return RunCheck(Liveness.UNKNOWN, "its record cannot be read again")
    if not fresh.is_active or fresh.tasks != record.tasks or \
            fresh.launcher != record.launcher:  # its follower wrote meanwhile
        _copy_into(record, fresh)
        return check
    fresh.end(RunState.LOST, message, None, step)
    fresh.save()
    _copy_into(record, fresh)
    return check


def _copy_into(record: RunRecord, fresh: RunRecord) -> None:
    for name in RunRecord.__dataclass_fields__:
        setattr(record, name, getattr(fresh, name))

