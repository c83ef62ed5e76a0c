"""What a profile says of the input: the share of the profiled steps' time in which training
waited for its data, read from the trace TensorFlow's profiler wrote (pure Python).

XProf's step and input-pipeline tools find no steps on CPU-only tasks (they group device
steps), but its trace viewer holds every event of the host: the steps dtgui's loop marks
(`train`, with the call's first and last step: dtgui.worker.profile_capture) and each
replica's wait for its next batch (the iterator's GetNext op, `IteratorGetNextOp::DoCompute`).
The input share is the time inside the marked calls during which at least one replica waited
(the union of those waits, so replicas waiting side by side count once), over the calls'
time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dtgui.worker.profile_request import STEP_MARK

INPUT_WAIT = "IteratorGetNextOp::DoCompute"  # a replica's wait for its next batch


@dataclass(frozen=True)
class ProfileInput:
    """A task's profiled steps and the share of their time spent waiting for input."""

    task: str
    first: int
    last: int
    share: float  # 0..1
    seconds: float  # the marked calls' time

    @property
    def text(self) -> str:
        return (f"XProf: input {round(self.share * 100)} % of step time (steps "
                f"{self.first}-{self.last}, {self.task})")


def wanted(event: Mapping[str, Any]) -> bool:
    """An event of the trace the input share is read from (the rest can be dropped early)."""
    return event.get("ph") == "X" and event.get("name") in (STEP_MARK, INPUT_WAIT)


def _merged(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for begin, end in sorted(spans):
        if out and begin <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((begin, end))
    return out


def input_share(task: str, events: Iterable[Mapping[str, Any]]) -> ProfileInput | None:
    """The input share of the marked calls in `events` (Chrome trace events as XProf's trace
    viewer gives them: name, ts and dur in microseconds, args); None without marked calls."""
    calls: list[tuple[float, float]] = []
    waits: list[tuple[float, float]] = []
    steps: list[int] = []
    for event in events:
        if not wanted(event):
            continue
        begin = float(event.get("ts", 0.0))
        span = (begin, begin + float(event.get("dur", 0.0)))
        if event["name"] == INPUT_WAIT:
            waits.append(span)
            continue
        calls.append(span)
        args = event.get("args") or {}
        for key in ("step_num", "last_step"):
            if str(args.get(key, "")).isdigit():
                steps.append(int(args[key]))
    if not calls:
        return None
    merged = _merged(calls)
    total = sum(end - begin for begin, end in merged)
    inside = 0.0
    for begin, end in _merged(waits):
        for call_begin, call_end in merged:
            inside += max(0.0, min(end, call_end) - max(begin, call_begin))
    share = min(1.0, inside / total) if total > 0 else 0.0
    return ProfileInput(task, min(steps, default=0), max(steps, default=0), share,
                        total / 1e6)
