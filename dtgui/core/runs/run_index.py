"""The Runs page's rows: every run of a runs folder as one flat row, read fast.

A row holds what the Runs page and `dtgui runs list` show of a run: its record's facts (name,
state, strategy, machines, times, final loss), what its events say once it has ended (steps
done, best validation value) and what the user wrote about it (tags, note, archived, kept in
`run-notes.json` beside the record, so that the record's writer and the user never write the
same file).

Reading 10,000 records and their events each time would be slow, so each runs folder keeps
an index, `.runs-index.json`: a row per run folder, stamped with the folder's modification
time (run.json and run-notes.json are always replaced whole, which changes it) and the
record's. A row is read again only when its folder changed, and its events only when its
record changed; a run still training is read again from its record each time (its events
are not summarized). The runs launched outside the runs folder (`listed_outside`: a bundle
run with `dtgui run`, a queue's own runs folder; a listed sweep's trials are listed under
their sweep) are listed too, indexed in the data dir (`outside_index`). Pure Python: no Qt; it blocks on the disk: not on a UI thread.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from dtgui.core.plans.plan import LOCAL_MACHINE, PLAN_NAME
from dtgui.core.runs.records import RECORD_NAME, RunHistory, RunRecord, listed_outside
from dtgui.core.runs.run_state import PRUNED_MESSAGE, RunState
from dtgui.core.settings import atomic_write_text, data_dir

INDEX_NAME = ".runs-index.json"
OUTSIDE_INDEX_NAME = ".outside-runs-index.json"  # in the data dir: `outside_index`'s
INDEX_SCHEMA = 2
NOTES_NAME = "run-notes.json"  # tags, note, archived: the user's, beside run.json

RUN, SWEEP, TRIAL = "run", "sweep", "trial"


def significant(value: float | None) -> str:
    """A loss or a metric as every view shows it: 4 significant digits (4.01e-05, not
    0.0000); "" when there is none."""
    if value is None or not math.isfinite(value):
        return ""
    return f"{value:.4g}"


@dataclass
class Notes:
    """What the user wrote about a run (any text: newlines and every character kept)."""

    tags: list[str] = field(default_factory=list)
    note: str = ""
    archived: bool = False

    @classmethod
    def read(cls, folder: Path | str) -> Notes:
        try:
            data = json.loads((Path(folder) / NOTES_NAME).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls()
        if not isinstance(data, dict):
            return cls()
        tags = data.get("tags")
        return cls(tags=[str(t) for t in tags] if isinstance(tags, list) else [],
                   note=str(data.get("note") or ""), archived=bool(data.get("archived")))

    def write(self, folder: Path | str) -> None:
        atomic_write_text(Path(folder) / NOTES_NAME,
                          json.dumps(asdict(self), indent=2, ensure_ascii=False) + "\n")


def clean_tags(tags: Iterable[str]) -> list[str]:
    """Tags as typed, each once, in order, without surrounding blanks or empty ones."""
    out: list[str] = []
    for tag in tags:
        tag = tag.strip()
        if tag and tag not in out:
            out.append(tag)
    return out


def split_tags(text: str) -> list[str]:
    """The tags of "a, b c" as typed in the Tags cell: separated by commas."""
    return clean_tags(text.split(","))


@dataclass
class RunRow:
    folder: str  # the run's local bundle (a sweep's folder for a sweep)
    name: str
    kind: str = RUN  # RUN, SWEEP or TRIAL
    parent: str = ""  # a trial's sweep folder
    run_id: str = ""
    state: str = ""
    active: bool = False
    message: str = ""
    strategy: str = ""  # the strategy's key (dtgui.core.plans.strategies)
    where: str = ""  # its machines, "local" for this machine alone
    started: float = 0.0
    ended: float | None = None
    steps: int | None = None  # steps done (a run still training: so far; None: no events)
    total_steps: int = 0
    final_loss: float | None = None
    best_val: float | None = None
    best_val_name: str = ""  # "val_loss" or "val_METRIC"
    summarized: bool = False  # steps and best value read from the ended run's events
    trained: str = ""  # a user's script in a few words ("" for dtgui's loop)
    tags: list[str] = field(default_factory=list)
    note: str = ""
    archived: bool = False

    @property
    def duration(self) -> float | None:
        """How long it ran; a run still training: how long it has been running."""
        if self.active and not self.ended and self.started:
            return max(0.0, time.time() - self.started)
        return self.ended - self.started if self.ended and self.started else None

    @property
    def state_text(self) -> str:
        """Its state named by its cause: a sweep trial its pruner stopped is "pruned"."""
        if self.state == RunState.STOPPED and self.message == PRUNED_MESSAGE:
            return "pruned"
        return self.state

    def text(self) -> str:
        """Everything a filter matches, lowercased."""
        return " ".join((self.name, self.state_text, self.strategy, self.where, self.note,
                         " ".join(self.tags), Path(self.folder).name,
                         self.run_id)).lower()

    def matches(self, words: Sequence[str]) -> bool:
        text = self.text()
        return all(w in text for w in words)

    def set_notes(self, notes: Notes) -> None:
        self.tags, self.note, self.archived = list(notes.tags), notes.note, notes.archived

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRow:
        try:  # the index's own rows: every key a field (10,000 of them read at each opening)
            return cls(**data)
        except TypeError:  # another dtgui's index
            return cls(**{k: v for k, v in data.items() if k in _ROW_FIELDS})


_ROW_FIELDS = frozenset(f.name for f in fields(RunRow))
_FIELD_NAMES = [f.name for f in fields(RunRow)]  # the index keeps a row's values in this order


def row_of_record(record: RunRecord, kind: str = RUN, parent: str = "") -> RunRow:
    """A record's row, without what its events say (`summarize`)."""
    where = ", ".join(m.name for m in record.machines) or LOCAL_MACHINE
    return RunRow(folder=record.bundle, name=record.run_name, kind=kind, parent=parent,
                  run_id=record.run_id, state=str(record.state), active=record.is_active,
                  message=record.message, strategy=str(record.strategy), where=where,
                  started=record.created, ended=record.ended, final_loss=record.final_loss)


def summarize(row: RunRow) -> None:
    """Fill the steps done and the best validation value of an ended run from its events
    (the compare view's reading of a bundle: one definition of each)."""
    from dtgui.core.runs.compare import summarize_run

    summary = summarize_run(row.folder, row.name, row.state)
    row.steps = summary.steps_done or None
    row.total_steps = summary.steps
    if row.final_loss is None:  # the record's, when the run's end wrote one
        row.final_loss = summary.final_loss
    if summary.listed_val is not None:  # its loss's best, else its preferred metric's
        row.best_val_name, row.best_val = summary.listed_val
    row.summarized = True


def steps_so_far(folder: str) -> int | None:
    """The furthest step the tasks of a run still training have reported."""
    from dtgui.core.events import last_step
    from dtgui.worker.layout import EVENTS_GLOB, OUTPUT_DIR

    found = [s for p in Path(folder, OUTPUT_DIR).glob(EVENTS_GLOB)
             if (s := last_step(p)) is not None]
    return max(found) if found else None


def planned(folder: str) -> tuple[int, str]:
    """(its planned steps, what it trained: a user's script in a few words, "" for dtgui's
    loop) from a run's plan.json."""
    from dtgui.core.plans.plan import Plan
    from dtgui.core.plans.plan_text import script_summary

    try:
        plan = Plan.from_dict(json.loads(Path(folder, PLAN_NAME).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return 0, ""
    if plan.script is not None:
        return 0, script_summary(plan)
    return int(plan.steps), ""


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


class RunIndex:
    """The rows of the runs under `root` (the runs folder, or a sweep's trials folder),
    through its index file."""

    def __init__(self, root: Path | str, kind: str = RUN, parent: str = "", *,
                 folders: Sequence[Path] | None = None) -> None:
        self.root = Path(root)
        self.kind, self.parent = kind, parent
        # the runs of these folders instead of those under `root` (runs outside the runs
        # folder: their index is `root`'s, keyed by their whole paths)
        self.folders = folders
        # folder name -> [[its folder's mtime, its record's mtime], the row's values in
        # field order]: lists, as JSON reads them fastest
        self._cache: dict[str, list[Any]] = {}
        self.changed = False

    @property
    def path(self) -> Path:
        return self.root / (INDEX_NAME if self.folders is None else OUTSIDE_INDEX_NAME)

    def _key(self, folder: str) -> str:
        return folder if self.folders is not None else Path(folder).name

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if isinstance(data, dict) and data.get("schema") == INDEX_SCHEMA \
                and data.get("fields") == _FIELD_NAMES and isinstance(data.get("rows"), dict):
            self._cache = data["rows"]

    def save(self) -> None:
        if not self.changed:
            return
        with contextlib.suppress(OSError):  # a cache: the next reading builds it again
            atomic_write_text(self.path, json.dumps(
                {"schema": INDEX_SCHEMA, "fields": _FIELD_NAMES, "rows": self._cache},
                separators=(",", ":"), ensure_ascii=False))
        self.changed = False

    def rows(self, *, summarize_ended: bool = True) -> list[RunRow]:
        """Every run's row, newest first. `summarize_ended`: read the events of ended runs
        not read yet (else their rows say `summarized=False`: `fill` reads them later)."""
        self._load()
        out: list[RunRow] = []
        seen: set[str] = set()
        if self.folders is not None:
            entries = [(str(f), str(f)) for f in self.folders if f.is_dir()]
        else:
            try:
                entries = [(e.path, e.name) for e in os.scandir(self.root)
                           if e.is_dir() and e.name[:1] != "."]
            except OSError:
                entries = []
        for path, key in entries:
            row = self._row(path, key)
            if row is not None:
                seen.add(key)
                out.append(row)
        for gone in set(self._cache) - seen:  # deleted or moved away
            del self._cache[gone]
            self.changed = True
        if summarize_ended:
            self.fill([r for r in out if not r.summarized and not r.active])
        out.sort(key=lambda r: r.started, reverse=True)
        self.save()
        return out

    def _row(self, folder: str, name: str) -> RunRow | None:
        """A run folder's row: from the index while the folder is unchanged (run.json and
        run-notes.json are replaced whole, which changes their folder's time), else read."""
        folder_time = _mtime(folder)
        cached = self._cache.get(name)
        old: RunRow | None = None
        if cached is not None:
            with contextlib.suppress(TypeError, ValueError):
                old = RunRow(*cached[1])
        if old is not None and cached is not None and cached[0][0] == folder_time \
                and not old.active:
            old.folder = folder  # the runs folder may have been moved
            return old
        record_time = _mtime(f"{folder}/{RECORD_NAME}") or _mtime(f"{folder}/{PLAN_NAME}")
        if not record_time:
            return None
        record = RunHistory.read(Path(folder))
        if record is None:
            return None
        row = row_of_record(record, self.kind, self.parent)
        if self.folders is not None:  # where it is listed from (a copied record may say other)
            row.folder = folder
        row.set_notes(Notes.read(folder))
        row.total_steps, row.trained = planned(folder)
        if row.active:  # its step so far, from the end of its events
            row.steps = steps_so_far(folder)
        if old is not None and old.summarized and cached is not None \
                and cached[0][1] == record_time:  # the same record: the same events read
            row.steps, row.total_steps, row.best_val, row.best_val_name = (
                old.steps, old.total_steps, old.best_val, old.best_val_name)
            row.final_loss, row.summarized = old.final_loss, True
        self._cache[name] = [[folder_time, record_time], _values(row)]
        self.changed = True
        return row

    def fill(self, rows: Iterable[RunRow]) -> None:
        """Read the events of these ended runs (steps done, best validation value) and keep
        them in the index (call `save`)."""
        for row in rows:
            with contextlib.suppress(OSError, ValueError):
                summarize(row)
            row.summarized = True
            cached = self._cache.get(self._key(row.folder))
            if cached is not None:
                cached[1] = _values(row)
                self.changed = True


def _values(row: RunRow) -> list[Any]:
    return [getattr(row, name) for name in _FIELD_NAMES]


def outside_index() -> RunIndex:
    """The rows of the runs outside the runs folder (`listed_outside`), indexed in the data
    dir (never in a folder of the user's)."""
    return RunIndex(data_dir(), folders=listed_outside())


def find(rows: Sequence[RunRow], text: str) -> list[RunRow]:
    """The rows `text` names: a run folder's path, or its folder name, run id or name (the
    command line's RUN). Several when it names more than one run."""
    path = Path(text).expanduser()
    if path.is_absolute() or os.sep in text:
        resolved = str(path.resolve())
        return [r for r in rows if str(Path(r.folder).resolve()) == resolved]
    return [r for r in rows if text in (Path(r.folder).name, r.run_id, r.name)]
