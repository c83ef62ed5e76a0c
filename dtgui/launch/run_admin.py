"""Managing past runs: listing them with the sweeps, their notes, delete, export and clone.

Used by the Runs page (off the UI thread) and by `dtgui runs`. Every function blocks on the
disk (delete on the network too).

Delete removes, in this order, so that nothing is half-deleted silently:
1. refused while the record says the run still trains (stop it first);
2. when asked, its copies on the machines (each machine's bundle directory its record
   names, over the run's own host layer, quoted): when one cannot be reached or removed, the
   run is kept whole here, its record still naming every copy, and the failure is said
   (try again, or delete it here only);
3. its local folder: renamed first (it leaves the list at once, and a crash half way leaves
   a hidden folder, not half a run), then removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from dtgui.core.bundles.bundle import Bundle, render_bundle
from dtgui.core.machines.registry import MachineRegistry
from dtgui.core.plans.placement import place_local
from dtgui.core.plans.plan import ModelFile, Plan, ScriptModel
from dtgui.core.runs.records import (
    RECORD_NAME,
    MachineRecord,
    RunRecord,
    known_sweeps,
    listed_outside,
)
from dtgui.core.runs.run_index import (
    SWEEP,
    TRIAL,
    Notes,
    RunIndex,
    RunRow,
    clean_tags,
    outside_index,
)
from dtgui.core.settings import runs_dir
from dtgui.core.sweeps.sweep import SWEEP_FILE, TRIALS_DIR
from dtgui.core.target_job import TargetJob

if TYPE_CHECKING:
    from dtgui.remote.connector import Connector

if TYPE_CHECKING:
    from dtgui.remote.connector import Connector

DELETING_PREFIX = ".deleting-"


class RunAdminError(RuntimeError):
    """Why a run cannot be deleted, exported or cloned, said to the user."""


# -- the list ---------------------------------------------------------------------------------
def sweep_rows(folder: Path, *, summarize_ended: bool = True) -> list[RunRow]:
    """A sweep's row followed by its trials' (none when the folder holds no sweep)."""
    from dtgui.launch.sweeps.sweep_process import sweep_pid

    try:
        data = json.loads((folder / SWEEP_FILE).read_text(encoding="utf-8"))
        plan = data["plan"] if isinstance(data, dict) else {}
    except (OSError, ValueError, KeyError):
        return []
    trials = RunIndex(folder / TRIALS_DIR, TRIAL, str(folder)).rows(
        summarize_ended=summarize_ended)
    running = sweep_pid(folder) is not None or any(t.active for t in trials)
    row = RunRow(folder=str(folder), name=str(plan.get("run_name") or folder.name), kind=SWEEP,
                 state="running" if running else "ended", active=running,
                 strategy=str(plan.get("strategy", "")),
                 message=f"{len(trials)} trial(s)")
    with contextlib.suppress(OSError):
        row.started = (folder / SWEEP_FILE).stat().st_mtime
    if trials:
        row.started = min([row.started, *(t.started for t in trials if t.started)])
        ends = [t.ended for t in trials if t.ended]
        row.ended = max(ends) if ends and not running else None
        row.where = ", ".join(sorted({w for t in trials for w in t.where.split(", ") if w}))
        best_of_trials(row, trials)
    row.summarized = True
    row.set_notes(Notes.read(folder))
    return [row, *trials]


def best_of_trials(sweep: RunRow, trials: list[RunRow]) -> None:
    """The sweep's Best val.: the best of its trials' (those validated as the first one
    with a value is)."""
    from dtgui.core.curve_values import lower_is_better

    valued = [t for t in trials if t.best_val is not None]
    if valued:
        name = valued[0].best_val_name
        same = [t.best_val for t in valued if t.best_val_name == name
                and t.best_val is not None]
        sweep.best_val = min(same) if lower_is_better(name.removeprefix("val_")) \
            else max(same)
        sweep.best_val_name = name


def list_rows(root: Path | None = None, *, summarize_ended: bool = True,
              sweeps: list[Path] | None = None) -> list[RunRow]:
    """Every run under `root` (default: the runs folder) and every known sweep, newest
    first, each sweep's trials right after it. A run listed as running whose tasks on this
    machine (or its Slurm job) are all gone is recorded as lost first
    (`dtgui.launch.start.run_check`; tasks on machines reached over SSH are not asked for a
    list: a resume or a reattach asks them)."""
    rows = _listed_rows(root, summarize_ended, sweeps)
    return _listed_rows(root, summarize_ended, sweeps) if _settle_rows(rows) else rows


def _listed_rows(root: Path | None, summarize_ended: bool, sweeps: list[Path] | None
          ) -> list[RunRow]:
    groups = [[r] for r in RunIndex(root if root is not None else runs_dir()).rows(
        summarize_ended=summarize_ended)]
    for folder in (sweeps if sweeps is not None else known_sweeps()):
        group = sweep_rows(folder, summarize_ended=summarize_ended)
        if group:
            groups.append(group)
    if root is None:  # and the runs launched elsewhere, each once
        listed = {str(Path(r.folder).resolve()) for group in groups for r in group}
        groups += [[r] for r in outside_index().rows(summarize_ended=summarize_ended)
                   if r.folder not in listed]
    groups.sort(key=lambda g: g[0].started, reverse=True)
    return [r for group in groups for r in group]


def _settle_rows(rows: list[RunRow]) -> bool:
    """Check the runs listed as running; True when one was recorded as lost."""
    from dtgui.core.runs.records import RunHistory
    from dtgui.launch.start.run_check import settle

    changed = False
    for row in rows:
        if row.active and row.kind != SWEEP:
            record = RunHistory.read(Path(row.folder))
            if record is not None and record.is_active:
                settle(record, reach=False)
                changed |= not record.is_active
    return changed


def fill_rows(rows: list[RunRow]) -> list[RunRow]:
    """Read the events of ended runs listed without them (steps, best validation value),
    and keep them in their folders' indexes; a sweep among `rows` takes the best of its
    trials' again."""
    outside = {str(p) for p in listed_outside()}
    by_root: dict[Path | None, list[RunRow]] = {}  # None: the runs outside the runs folder
    for row in rows:
        if not row.summarized and not row.active and row.kind != SWEEP:
            root = None if row.folder in outside else Path(row.folder).parent
            by_root.setdefault(root, []).append(row)
    for root, pending in by_root.items():
        index = outside_index() if root is None else RunIndex(root)
        index.rows(summarize_ended=False)
        index.fill(pending)
        index.save()
    for sweep in (r for r in rows if r.kind == SWEEP):
        best_of_trials(sweep, [r for r in rows if r.kind == TRIAL and r.parent == sweep.folder])
    return rows


_NOTES_LOCK = threading.Lock()


def set_notes(folder: Path | str, *, tags: list[str] | None = None, note: str | None = None,
              archived: bool | None = None, add_tags: list[str] | None = None) -> Notes:
    """Change what the user wrote about a run or a sweep (each given field). One change at a
    time: the page writes tags and a note from workers of their own, and each rewrites the
    file it read."""
    with _NOTES_LOCK:
        return _set_notes(folder, tags, note, archived, add_tags)


def _set_notes(folder: Path | str, tags: list[str] | None, note: str | None,
               archived: bool | None, add_tags: list[str] | None) -> Notes:
    notes = Notes.read(folder)
    if tags is not None:
        notes.tags = clean_tags(tags)
    if add_tags:
        notes.tags = clean_tags([*notes.tags, *add_tags])
    if note is not None:
        notes.note = note
    if archived is not None:
        notes.archived = archived
    notes.write(folder)
    return notes


# -- delete -----------------------------------------------------------------------------------
@dataclass
class Deleted:
    """What a delete did: the copies removed, the machines that could not be reached (then the
    run was kept here), and whether the local folder is gone."""

    removed: list[str] = field(default_factory=list)  # "machine:directory"
    unreachable: list[str] = field(default_factory=list)  # "machine: why"
    local: bool = False

    def text(self) -> str:
        if self.unreachable:
            return ("Nothing was deleted here: " + "; ".join(self.unreachable) + ". The run "
                    "is kept, its record still naming every copy: try again when the "
                    "machine answers, or delete it here only.")
        copies = f" and its copies on {', '.join(self.removed)}" if self.removed else ""
        return f"Deleted the run's folder{copies}."


def training_refusal(record: RunRecord) -> str:
    """Why a run cannot be deleted now ("" when it can)."""
    if record.is_active:
        return (f"{record.run_name} is still training ({record.state}): stop it first "
                "(Runs > Reattach, then Stop; or `dtgui run`'s Ctrl-C), or wait for it to end. "
                "If it ended while dtgui was closed, Reattach reads its end.")
    return ""


def remote_copies(record: RunRecord) -> list[MachineRecord]:
    """The machines keeping a copy of the run's bundle other than its local folder."""
    local = Path(record.bundle).resolve()
    return [m for m in record.machines if m.dir and not (
        m.is_local and Path(m.dir).expanduser().resolve() == local)]


def _safe_dir(rec: MachineRecord, record: RunRecord) -> str:
    """The copy's directory, refused unless it is the run's own (its run id a component)."""
    parts = PurePosixPath(rec.dir).parts
    if record.run_id not in parts or len(parts) < 2:
        raise RunAdminError(f"{rec.name}: {rec.dir!r} is not this run's own directory: "
                            "it is left as it is")
    return rec.dir


RemoveCopy = Callable[[MachineRecord, str], None]


def remove_copy(record: RunRecord, registry: MachineRegistry | None = None,
                connector: Connector | None = None) -> RemoveCopy:
    """What removes one machine's copy: its target's driver (`Driver.remove_copy`), over a
    connection for a target reached over one."""
    from dtgui.launch.drivers import driver_for, target_of_record
    from dtgui.launch.launch_state import default_connector

    bundle = Bundle.open(Path(record.bundle))
    connect = connector or default_connector()

    def remove(rec: MachineRecord, directory: str) -> None:
        target = target_of_record(rec, registry)
        driver_for(target).remove_copy(target, bundle, directory,
                                       connect if target.needs_connection else None)

    return remove


def delete_run(folder: Path | str, *, remote: bool = False,
               remove: RemoveCopy | None = None) -> Deleted:
    """Delete a run: its copies on the machines first (when `remote`), then its folder here
    (see the module's docstring for the order). RunAdminError when it is refused."""
    folder = Path(folder)
    record = _readable_record(folder)
    if record is not None and (why := training_refusal(record)):
        raise RunAdminError(why)
    done = Deleted()
    if remote and record is not None:
        copies = remote_copies(record)
        if copies:
            remove = remove or remove_copy(record)
        for rec in copies:
            try:
                directory = _safe_dir(rec, record)
                assert remove is not None
                remove(rec, directory)
                done.removed.append(f"{rec.name}:{directory}")
            except Exception as exc:  # noqa: BLE001 - any failure keeps the run, said
                done.unreachable.append(f"{rec.name}: {exc}")
        if done.unreachable:
            return done
    _remove_local(folder)
    done.local = True
    return done


def _readable_record(folder: Path) -> RunRecord | None:
    if not (folder / RECORD_NAME).is_file():
        return None  # an older run without a record: its folder only
    try:
        return RunRecord.load(folder)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise RunAdminError(f"{folder / RECORD_NAME} cannot be read ({exc}): nothing was "
                            "deleted; remove the folder by hand if it is no run") from exc


def _remove_local(folder: Path) -> None:
    if not folder.is_dir():
        raise RunAdminError(f"{folder} is no run folder")
    hidden = folder.with_name(f"{DELETING_PREFIX}{folder.name}-{time.time_ns()}")
    try:
        folder.rename(hidden)
    except OSError as exc:
        raise RunAdminError(f"cannot delete {folder}: {exc.strerror}") from exc
    shutil.rmtree(hidden, ignore_errors=True)


# -- export and clone -------------------------------------------------------------------------
def source_plan(folder: Path | str) -> tuple[Plan, TargetJob | None]:
    """A past run's plan as the wizard and an export take it, and the job it was sent as
    (its kind's driver reads it from the bundle; None for processes): its model file or script pointing into the run's
    bundle (the copy it trained with). RunAdminError when the bundle cannot be read."""
    from dtgui.core.bundles.bundle import BundleError
    from dtgui.core.plans.plan import PlanError

    root = Path(folder).resolve()
    try:
        bundle = Bundle.open(root)
    except (BundleError, PlanError, OSError, ValueError) as exc:
        raise RunAdminError(f"{folder}: its plan cannot be read ({exc})") from exc
    plan = bundle.plan
    model = plan.model
    if isinstance(model, ModelFile):
        plan = plan.with_changes(model=ModelFile(
            str(root / model.path), str(root / model.project) if model.project else ""))
    elif isinstance(model, ScriptModel):
        plan = plan.with_changes(model=dataclasses.replace(model,
                                                           project=str(root / model.project)))
    from dtgui.launch.drivers import bundle_job

    return plan, bundle_job(root)


def write_export(plan: Plan, destination: Path, job: TargetJob | None = None) -> tuple[Path, str]:
    """Write the bundle of `plan` to `destination` (as `job`, a job a wizard box made, when
    given: its driver writes it), and how to start it without dtgui."""
    if job is not None:
        from dtgui.launch.drivers import export_job

        return export_job(plan, destination, job)
    placed = plan if plan.tasks else place_local(plan)
    path = render_bundle(placed, destination).path
    return path, (f"\n  cd {path}\n  python3 -m pip install -r requirements.txt\n"
                  "  bash run.sh")


def export_run(folder: Path | str, destination: Path) -> tuple[Path, str]:
    """Write a past run's bundle to `destination` (new or empty), as it was sent."""
    plan, job = source_plan(folder)
    return write_export(plan, destination, job)


def export_destination(chosen: Path, name: str) -> Path:
    """Where an export into the chosen directory goes: the directory itself when it is
    empty, else `<chosen>/<name>` (RunAdminError when that is taken)."""
    if chosen.is_dir() and not any(chosen.iterdir()):
        return chosen
    target = chosen / name
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise RunAdminError(f"{target} already exists and is not empty: choose another "
                            "directory.")
    return target
