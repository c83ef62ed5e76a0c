"""Run records and the run history. Pure Python: no Qt, no SSH, no TensorFlow.

Every run the app starts keeps its bundle under `runs_dir()/<run>/` and a record beside the
plan, `runs_dir()/<run>/run.json`: where each task runs (machine, bundle directory there,
process-group id), the state and, once the run has ended, its result. The record is what lets
a new GUI session reattach to a run that kept training while dtgui was closed; it never holds
a secret (a machine entry is the registry's entry: host, port, user, sign-in method, key
file path).

The events of remote tasks are mirrored into the local bundle's `output/` as they are read,
so a finished run can be reopened from this machine alone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from dtgui.core.plans.plan import PLAN_NAME, is_local_machine
from dtgui.core.runs.run_state import ENDED, RunState
from dtgui.core.settings import atomic_write_text, data_dir, runs_dir
from dtgui.worker.layout import EVENTS_GLOB, OUTPUT_DIR

RECORD_NAME = "run.json"
RECORD_SCHEMA = 1

__all__ = ["ENDED", "RECORD_NAME", "RunHistory", "RunRecord", "RunState", "Segment"]


@dataclass
class MachineRecord:
    name: str  # LOCAL_MACHINE for this machine
    dir: str  # the bundle directory on that machine (absolute)
    python: str = ""
    address: str = ""  # the address in TF_CONFIG
    machine: dict[str, Any] = field(default_factory=dict)  # Machine.to_dict(); {} for local
    job_id: str = ""  # the Slurm job holding its tasks ("" = processes started by dtgui)
    kind: str = ""  # its target's kind (dtgui.launch.drivers; "" in older records)

    @property
    def is_local(self) -> bool:
        """On this machine (`is_local_machine`: the one definition, by name)."""
        return is_local_machine(self.name)


@dataclass
class TaskRecord:
    task: str  # "worker:0"
    machine: str
    pid: int = 0  # process-group id of the task on its machine (0: not started by dtgui)
    job_id: str = ""  # the batch job holding it where a scheduler runs it (a Slurm job)
    # the process group's identity when it started: "BOOT_ID/START_TICKS" of its leader, so
    # that a reused id does not count (dtgui.core.runs.liveness; "" = not known)
    started: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any], jobs: dict[str, str]) -> TaskRecord:
        """`jobs`: machine -> the job its record names. An older record kept a job's id in
        `pid`: read there, it is the job id (and no process id)."""
        task = cls(**_known_fields(cls, data))
        job = jobs.get(task.machine, "")
        if not task.job_id and job and str(task.pid) == job:
            task.job_id, task.pid = job, 0
        return task


@dataclass
class Segment:
    """One stretch of a run's training: its first start, then each resume."""

    started: float
    machines: list[str] = field(default_factory=list)
    from_step: int = 0  # the checkpoint's step it started from (0: the start)
    steps: int = 0  # the step it had reached when it ended
    ended: float | None = None
    state: RunState = RunState.RUNNING

    def __post_init__(self) -> None:
        self.state = RunState.named(self.state)


@dataclass
class RunRecord:
    run_id: str
    run_name: str
    bundle: str  # the local bundle directory
    strategy: str = ""
    created: float = 0.0
    state: RunState = RunState.STARTING
    message: str = ""
    final_loss: float | None = None
    ended: float | None = None
    restarts: int = 0
    max_restarts: int = 0  # the run's policy: restart from the last checkpoint up to N times
    machines: list[MachineRecord] = field(default_factory=list)
    tasks: list[TaskRecord] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)  # its first start, then each resume
    # the MLflow run it is sent to, and where (dtgui.launch.trackers.mlflow_runs): a reattach
    # goes on there ("" = not sent)
    mlflow_uri: str = ""
    mlflow_run_id: str = ""
    # the process that launched it on this machine, "PID/BOOT_ID/START_TICKS": while its
    # tasks are not recorded yet, whether that launch can still start them
    # (dtgui.launch.start.run_check; "" = not known)
    launcher: str = ""

    def __post_init__(self) -> None:  # a name read from run.json becomes its state
        self.state = RunState.named(self.state)

    # -- queries -----------------------------------------------------------------------------
    @property
    def path(self) -> Path:
        return Path(self.bundle) / RECORD_NAME

    @property
    def is_active(self) -> bool:
        """Started and not known to have ended (it may have ended while dtgui was closed)."""
        return self.state.active

    @property
    def is_multi_machine(self) -> bool:
        return any(not m.is_local for m in self.machines)

    def machine(self, name: str) -> MachineRecord | None:
        return next((m for m in self.machines if m.name == name), None)

    def pids(self) -> dict[str, int]:
        """Task -> its process-group id, for the tasks dtgui started as processes."""
        return {t.task: t.pid for t in self.tasks if t.pid}

    def job_ids(self) -> dict[str, str]:
        """Task -> the batch job holding it, for the tasks a scheduler runs."""
        return {t.task: t.job_id for t in self.tasks if t.job_id}

    # -- changes -----------------------------------------------------------------------------
    def set_started(self, task: str, machine: str, *, pid: int = 0, job_id: str = "",
                    started: str = "") -> None:
        """The task started on `machine`: as process group `pid` (whose identity is
        `started`), or in the batch job `job_id`."""
        for rec in self.tasks:
            if rec.task == task:
                rec.machine, rec.pid, rec.job_id, rec.started = machine, pid, job_id, started
                return
        self.tasks.append(TaskRecord(task, machine, pid, job_id, started))

    def begin_segment(self, from_step: int = 0) -> None:
        """A stretch of training starts now on the recorded machines (a resume: from the
        checkpoint of `from_step`). A record of an older dtgui gets its first stretch first."""
        if not self.segments and from_step:
            self.segments.append(Segment(self.created, [m.name for m in self.machines],
                                         ended=self.ended, state=self.state))
        self.segments.append(Segment(time.time(), [m.name for m in self.machines], from_step))

    def end(self, state: RunState, message: str, final_loss: float | None,
            step: int | None = None) -> None:
        self.state, self.message = state, message
        if final_loss is not None:
            self.final_loss = final_loss
        self.ended = time.time()
        if self.segments:
            last = self.segments[-1]
            last.ended, last.state = self.ended, state
            if step is not None:
                last.steps = step

    def recorded_end(self) -> tuple[RunState, str] | None:
        """How run.json says this stretch of the run ended well (finished or stopped), as
        another process following it wrote it; None: it does not (or cannot be read)."""
        try:
            written = RunRecord.load(Path(self.bundle))
        except (OSError, ValueError, TypeError):
            return None
        if written.state not in (RunState.FINISHED, RunState.STOPPED) or \
                written.run_id != self.run_id or len(written.segments) != len(self.segments):
            return None
        return written.state, written.message

    # -- JSON --------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"schema": RECORD_SCHEMA, **asdict(self)}

    def save(self) -> None:
        """Write run.json; a run folder outside the runs folder is listed in the register of
        those (`remember_run`), so that every run is listed and holds its machines however it
        was started (`dtgui run BUNDLE`, a sweep's trial, a resume)."""
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        try:
            atomic_write_text(self.path, text)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            # a full disk has no room for a second copy: the record is written over itself
            # (its own blocks, written compact to fit them), so that it says how the run
            # ended rather than that it runs
            with open(self.path, "r+", encoding="utf-8") as f:
                f.write(json.dumps(self.to_dict(), separators=(",", ":")) + "\n")
                f.truncate()
        remember_run(self.bundle)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        if data.get("schema") != RECORD_SCHEMA:
            raise ValueError(f"run record schema {data.get('schema')!r} is not {RECORD_SCHEMA}")
        known = set(cls.__dataclass_fields__)
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["machines"] = [MachineRecord(**_known_fields(MachineRecord, m))
                              for m in data.get("machines", [])]
        jobs = {m.name: m.job_id for m in kwargs["machines"] if m.job_id}
        kwargs["tasks"] = [TaskRecord.from_dict(t, jobs) for t in data.get("tasks", [])]
        kwargs["segments"] = [Segment(**_known_fields(Segment, s))
                              for s in data.get("segments", [])]
        return cls(**kwargs)

    @classmethod
    def load(cls, bundle_dir: Path) -> RunRecord:
        data = json.loads((Path(bundle_dir) / RECORD_NAME).read_text(encoding="utf-8"))
        record = cls.from_dict(data)
        record.bundle = str(Path(bundle_dir))  # the directory may have been moved
        return record


def _known_fields(cls: type[MachineRecord | TaskRecord | Segment], data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def state_from_events(bundle_dir: Path) -> RunState:
    """For a bundle without a record (a run of an older dtgui): finished / failed / unknown."""
    from dtgui.core.events import read_all  # numpy: only for runs without a record

    kinds: set[str] = set()
    for path in (Path(bundle_dir) / OUTPUT_DIR).glob(EVENTS_GLOB):
        kinds.update(e.kind for e in read_all(path) if e.kind in ("finished", "failed"))
    if "failed" in kinds:
        return RunState.FAILED
    return RunState.FINISHED if "finished" in kinds else RunState.UNKNOWN


OUTSIDE_FILE = "outside-runs.json"  # in the data dir: the run folders outside the runs folder
SWEEPS_FILE = "sweeps.json"  # the sweep folders this user made or opened, in the data dir


def outside_runs() -> list[Path]:
    """The register of the run folders outside the runs folder (a bundle run with `dtgui
    run`, a sweep's trial, a queue's or a script's own runs folder) that still hold a run; the
    file forgets the others. Every record saved there adds its folder (`RunRecord.save`)."""
    path = data_dir() / OUTSIDE_FILE
    with _outside_lock():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        known = [Path(str(p)) for p in data] if isinstance(data, list) else []
        kept = [p for p in known if (p / RECORD_NAME).is_file()]
        if len(kept) != len(known):
            with contextlib.suppress(OSError):
                atomic_write_text(path, json.dumps([str(p) for p in kept], indent=1))
    return kept


def listed_outside() -> list[Path]:
    """The register's run folders listed on their own: not the trials of a listed sweep
    (`known_sweeps`; a run folder inside a sweep's folder is its trial), which are listed
    under their sweep."""
    sweeps = [p.expanduser().resolve() for p in known_sweeps()]
    return [p for p in outside_runs() if not any(p.is_relative_to(s) for s in sweeps)]


def remember_run(folder: Path | str) -> None:
    """Add the run in `folder` to the register of those outside the runs folder, when it is
    outside it. A register that cannot be written leaves the run unlisted: the run goes on."""
    folder = Path(folder).expanduser().resolve()
    if folder.parent == runs_dir().expanduser().resolve():
        return
    path = data_dir() / OUTSIDE_FILE
    with _outside_lock():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = []
        known = [str(p) for p in data] if isinstance(data, list) else []
        if str(folder) not in known:
            with contextlib.suppress(OSError):
                atomic_write_text(path, json.dumps([*known, str(folder)], indent=1))


def known_sweeps() -> list[Path]:
    """The sweep folders listed on the Runs page (`remember_sweep`)."""
    try:
        data = json.loads((data_dir() / SWEEPS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [Path(str(p)) for p in data] if isinstance(data, list) else []


def remember_sweep(folder: Path) -> None:
    """List the sweep in `folder` on the Runs page (a sweep made or opened)."""
    folder = Path(folder).expanduser().resolve()
    known = known_sweeps()
    if folder not in known:
        with contextlib.suppress(OSError):
            atomic_write_text(data_dir() / SWEEPS_FILE,
                              json.dumps([str(p) for p in [*known, folder]], indent=1))


@contextlib.contextmanager
def _outside_lock() -> Iterator[None]:
    """Launches in several processes (the app, a queue, `dtgui run`) add to the file at once."""
    lock = data_dir() / f".{OUTSIDE_FILE}.lock"
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock, "a")  # noqa: SIM115 - held for the block
    except OSError:
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


class RunHistory:
    """The runs under `runs_dir()` and those outside it (`listed_outside`: a listed sweep's
    trials are listed under their sweep), newest first, from their records; the runs under
    `root` alone when it is given."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else runs_dir()
        self.outside = root is None

    def records(self) -> list[RunRecord]:
        return self._read_all(listed_outside() if self.outside else [])

    def running(self) -> list[RunRecord]:
        return [r for r in self.records() if r.is_active]

    def live(self) -> list[RunRecord]:
        """Every run that holds its machines now, wherever its record is: the active runs of
        this directory and of the register of those outside the runs folder (`outside_runs`:
        a bundle run with `dtgui run`, a sweep's trial, a resumed run), once each."""
        return [r for r in self._read_all(outside_runs()) if r.is_active]

    def _read_all(self, outside: list[Path]) -> list[RunRecord]:
        """The records of this directory's run folders and of `outside`, each folder read
        once, newest first."""
        try:
            entries = [p for p in self.root.iterdir() if p.is_dir()]
        except OSError:
            entries = []
        root = self.root.expanduser().resolve()  # the register's folders are resolved
        entries += [p for p in outside if p.parent != root]
        out = [r for r in map(self.read, entries) if r is not None]
        out.sort(key=lambda r: r.created, reverse=True)
        return out

    def finished(self) -> list[RunRecord]:
        return [r for r in self.records() if not r.is_active]

    def find(self, run_id: str) -> RunRecord | None:
        return next((r for r in self.records() if r.run_id == run_id), None)

    def lookup(self, text: str) -> RunRecord:
        """The run `text` names: its folder (a path holding its record, wherever it is), its
        id, its folder's name, or its run name when one run has it. LookupError says why
        none is."""
        if (Path(text) / RECORD_NAME).is_file():
            return RunRecord.load(Path(text))
        records = self.records()
        for exact in (lambda r: r.run_id == text, lambda r: Path(r.bundle).name == text):
            found = [r for r in records if exact(r)]
            if found:
                return found[0]
        named = [r for r in records if r.run_name == text]
        if len(named) == 1:
            return named[0]
        if named:
            raise LookupError(f"{len(named)} runs are named {text!r}: give one's folder name ("
                              + ", ".join(Path(r.bundle).name for r in named) + ")")
        raise LookupError(f"no run named {text!r} in {self.root}")

    @staticmethod
    def read(bundle: Path) -> RunRecord | None:
        """The record of one run folder (None: not a run, or unreadable)."""
        if (bundle / RECORD_NAME).is_file():
            try:
                return RunRecord.load(bundle)
            except (OSError, ValueError, TypeError, KeyError):
                return None
        plan_file = bundle / PLAN_NAME
        if not plan_file.is_file():
            return None
        from dtgui.core.run_curves import final_loss_of_bundle  # numpy: as read_all

        try:  # a run from before run records (and plan schemas): its name and strategy
            plan = json.loads(plan_file.read_text(encoding="utf-8"))
            created = plan_file.stat().st_mtime
        except (OSError, ValueError):
            return None
        if not isinstance(plan, dict):
            return None
        return RunRecord(run_id=bundle.name, run_name=str(plan.get("run_name", bundle.name)),
                         bundle=str(bundle), strategy=str(plan.get("strategy", "")),
                         created=created, state=state_from_events(bundle),
                         final_loss=final_loss_of_bundle(bundle))
