"""A sweep's life as events: what changed between two looks at it (docs/sweeps.md).

A `SweepLook` is the sweep as read once: its table of trials (`dtgui.core.sweeps.sweep_study.
read_sweep`, the study being the one record of them) and whether its queue still runs (its
process, or the queue in the app). `changes(before, after)` says what happened in between, in
the order it happened for each trial: a trial started, reported a value to the pruner, was
pruned, ended (finished, pruned or failed); then, once the queue no longer runs, the sweep
ended. A trial that started and ended between two looks gets each of its events all the same,
so a follower sees every trial start before it ends. Pure: the sweep's session
(`dtgui.ui.sweep_session`) says these as typed signals, whether the queue runs in the app or in
its process of its own.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from dtgui.core.sweeps.sweep_study import SweepTable, TrialRow

ENDS = ("finished", "pruned", "stopped", "failed")  # a trial's ends (TrialRow.state)


class Change(str, enum.Enum):
    TRIAL_STARTED = "trial started"
    TRIAL_REPORTED = "trial reported"
    TRIAL_PRUNED = "trial pruned"
    TRIAL_ENDED = "trial ended"
    SWEEP_ENDED = "sweep ended"


@dataclass(frozen=True)
class SweepEvent:
    """One change: `trial` its number (-1 for the sweep's end); a report's `step` and
    `value`; an end's `state` (finished, pruned, stopped, failed) and `value` (its objective)."""

    change: Change
    trial: int = -1
    step: int | None = None
    value: float | None = None
    state: str = ""


@dataclass(frozen=True)
class SweepLook:
    """The sweep as read once."""

    table: SweepTable
    running: bool  # its queue still runs (its process, or in the app)

    def trial(self, number: int) -> TrialRow | None:
        for row in self.table.rows:
            if row.number == number:
                return row
        return None


def _trial_changes(before: TrialRow | None, after: TrialRow) -> list[SweepEvent]:
    number = after.number
    events: list[SweepEvent] = []
    was_started = before is not None and before.state != "waiting"
    if after.state == "waiting":
        return events
    if not was_started:
        events.append(SweepEvent(Change.TRIAL_STARTED, number))
    told = before.last_step if before is not None else None
    if after.last_step is not None and (told is None or after.last_step > told):
        events.append(SweepEvent(Change.TRIAL_REPORTED, number, after.last_step,
                                 after.last_value))
    ended_before = before is not None and before.state in ENDS
    if after.state in ENDS and not ended_before:
        if after.state == "pruned":
            events.append(SweepEvent(Change.TRIAL_PRUNED, number, after.last_step,
                                     after.last_value))
        events.append(SweepEvent(Change.TRIAL_ENDED, number, value=after.objective,
                                 state=after.state))
    return events


def changes(before: SweepLook | None, after: SweepLook) -> list[SweepEvent]:
    """What happened between two looks (`before` None: since the sweep began), trial by trial
    in their numbers' order, then the sweep's end when its queue stopped running."""
    events: list[SweepEvent] = []
    for row in sorted(after.table.rows, key=lambda r: r.number):
        events += _trial_changes(before.trial(row.number) if before is not None else None, row)
    if not after.running and (before is None or before.running):
        events.append(SweepEvent(Change.SWEEP_ENDED))
    return events

