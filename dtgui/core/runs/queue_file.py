"""The run queue's file: single runs that wait for their GPUs or machines ("Launch when
free", docs/gui.md), in order, kept in `<data dir>/queue/queue.json` (`dtgui.launch.queue.run_queue`
reads and writes it under a lock and runs the queue).

An entry is a placed plan with what its launch needs (the job a wizard box made, e.g. a
Slurm job, as `{"kind": ..., **fields}`; the restarts allowed; the runs directory), or an
exported bundle (`dtgui queue add BUNDLE`: its path, its plan as read when it was queued),
its state (`waiting`; `starting` while its launch runs, since `started`; `cancelled` when a
cancel came while its launch ran: the run is stopped as soon as it has started; `failed`
when it could not start, with the cause in words, kept until it is cancelled) and what it
waits for, as the queue's process last found. An entry that started leaves the file: it is
a run of the history from then on.

A file that cannot be read is never written over: `read_entries` raises `QueueError` saying
where it is and what to do, and nothing is changed until it is mended or moved aside.

Pure: no I/O but the text given and returned.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

QUEUE_SCHEMA = 1
WAITING, STARTING, CANCELLED, FAILED = "waiting", "starting", "cancelled", "failed"
EVERY_GPU = -1  # in a claim: every GPU of the machine (a CPU run, or a GPU run given none)


class QueueError(Exception):
    """The queue cannot be read or changed as asked; the message says what to do."""


@dataclass(frozen=True)
class QueueEntry:
    """One run waiting in the queue."""

    id: str
    plan: dict[str, Any]  # the placed plan (`Plan.to_dict()`)
    job: dict[str, Any] | None = None  # a wizard box's job, {"kind": ..., **fields}
    max_restarts: int = 0
    runs_root: str = ""  # where its run folder goes ("": the data dir's runs)
    queued: float = 0.0
    state: str = WAITING
    waits_for: str = ""  # what the queue's process last found it waits for
    error: str = ""  # why its launch failed (state `failed`)
    claims: tuple[tuple[str, int], ...] = field(default=())  # (machine, GPU or EVERY_GPU)
    bundle: str = ""  # an exported bundle started as it is ("": the plan is rendered)
    started: float = 0.0  # when its launch began (state `starting` or `cancelled`)

    @property
    def name(self) -> str:
        return str(self.plan.get("run_name") or self.id)

    @property
    def waiting(self) -> bool:
        return self.state == WAITING

    @property
    def launching(self) -> bool:
        """Its launch began and has not been settled (started, or could not start)."""
        return self.state in (STARTING, CANCELLED)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["claims"] = [list(c) for c in self.claims]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QueueEntry:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["claims"] = tuple((str(m), int(g)) for m, g in values.get("claims") or ())
        entry = cls(**values)
        if not entry.id or not isinstance(entry.plan, dict):
            raise ValueError("an entry without an id or a plan")
        return entry


def read_entries(text: str, where: str) -> list[QueueEntry]:
    """The entries of the queue file's `text` (read from `where`), in order. QueueError when
    it is damaged, naming the file and what to do."""
    try:
        data = json.loads(text) if text.strip() else {"schema": QUEUE_SCHEMA, "entries": []}
        if not isinstance(data, dict) or data.get("schema") != QUEUE_SCHEMA:
            raise ValueError(f"not a run queue of schema {QUEUE_SCHEMA}")
        return [QueueEntry.from_dict(item) for item in data["entries"]]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise QueueError(
            f"The run queue {where} is damaged ({exc}). Nothing was changed and no queued "
            f"run was started. Mend it, or move it aside to start an empty queue (its runs "
            f"are kept in it): mv {where} {where}.damaged") from exc


def entries_text(entries: Sequence[QueueEntry]) -> str:
    return json.dumps({"schema": QUEUE_SCHEMA, "entries": [e.to_dict() for e in entries]},
                      indent=1) + "\n"


def position(entries: Sequence[QueueEntry], entry_id: str) -> int:
    """The index in `entries` of the entry `entry_id` names: its id, or its run's name when
    one queued run has it. QueueError when none is (it started, or was cancelled), or the
    name is not one run's."""
    for i, entry in enumerate(entries):
        if entry.id == entry_id:
            return i
    named = [i for i, entry in enumerate(entries) if entry.name == entry_id]
    if len(named) == 1:
        return named[0]
    if named:
        raise QueueError(f"{len(named)} queued runs are named {entry_id}: give one's id ("
                         + ", ".join(entries[i].id for i in named) + ").")
    raise QueueError(f"No run {entry_id} is queued (it started, or was cancelled).")


def moved(entries: Sequence[QueueEntry], entry_id: str, by: int) -> list[QueueEntry]:
    """`entries` with the entry moved `by` places (negative: towards the front), kept
    within the queue."""
    out = list(entries)
    i = position(out, entry_id)
    entry = out.pop(i)
    out.insert(max(0, min(len(out), i + by)), entry)
    return out


def overlaps(a: Sequence[tuple[str, int]], b: Sequence[tuple[str, int]]) -> bool:
    """Whether two runs want a same GPU (or the same machine, where one wants all of it)."""
    return any(ma == mb and (ga == gb or EVERY_GPU in (ga, gb)) for ma, ga in a for mb, gb in b)


def ahead_of(entries: Sequence[QueueEntry], index: int) -> QueueEntry | None:
    """The first waiting entry before `entries[index]` that wants what it wants: it goes
    first."""
    claims = entries[index].claims
    return next((e for e in entries[:index] if e.waiting and overlaps(e.claims, claims)), None)


def with_state(entry: QueueEntry, state: str, **changes: Any) -> QueueEntry:
    return replace(entry, state=state, **changes)
