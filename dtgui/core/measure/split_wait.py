"""A task whose step split is not measured yet, and what the dashboard says of it.

A task measures its split only once its training so far pays for the calibration within the
budget (`dtgui/worker/step_timing.py`: 5 % of the first minute, 1 % of a long run), on the
clock since its training began. That clock starts again with each stretch of training (a
resume, a restart from a checkpoint): a run stopped and resumed may have trained long enough
in all and still never long enough in one stretch. Its `split` events without a split say
from when it would be measured (`deferred_clock`) and how long the stretch had trained
(`clock_seconds`); `RunCurves` keeps the latest as a `SplitWait` a task, with the longest of
its earlier stretches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dtgui.core.measure.bottleneck import clock_text

WHY = "measuring takes at most 5 % of the first minute of training, 1 % of a long run"


def deferred_until(data: Mapping[str, Any]) -> float | None:
    """Seconds from which a task not measured yet will be (a `split` event without a split:
    its run too short so far to measure within the budget), on the clock since its training
    began (`deferred_clock`; an older event's `deferred_until`: of training); None for a
    split."""
    for key in ("deferred_clock", "deferred_until"):
        value = data.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            return max(0.0, float(value))
    return None


@dataclass(frozen=True)
class SplitWait:
    """A task not measured yet: from when on its stretch's clock (`needed`), how long that
    stretch had trained when it last said (`trained`, 0: not said), which stretch of
    training it is (1: the first; then each resume or restart) and the longest earlier
    stretch's clock (`longest`)."""

    needed: float
    trained: float = 0.0
    stretch: int = 1
    longest: float = 0.0

    def then(self, needed: float, trained: float, stretch: int) -> SplitWait:
        """The task's next word: in the same stretch, or in a later one (this stretch then
        counts among the earlier ones)."""
        longest = self.longest if stretch == self.stretch else max(self.longest, self.trained)
        return SplitWait(needed, trained, stretch, longest)


def wait_text(waits: Iterable[SplitWait], ended: bool) -> str:
    """Why the run has no split yet (or had none), in the terms of the budget: the task that
    waits longest."""
    found = max(waits, key=lambda w: (w.needed, w.trained), default=None)
    if found is None:
        return ""
    need = clock_text(found.needed)
    resumed = found.stretch > 1
    if not ended:
        if resumed:
            return (f"Not measured yet: measuring starts again when a run resumes, once a task "
                    f"has trained about {need} on the clock since it resumed ({WHY})")
        return (f"Not measured yet: measured once a task has trained about {need} on the "
                f"clock ({WHY})")
    if resumed:
        longest = max(found.longest, found.trained)
        trained = (f": the longest trained {clock_text(longest)}" if longest > 0 else "")
        return (f"Not measured: no stretch of training was long enough (measuring starts "
                f"again when a run resumes and needs about {need} of training in one "
                f"stretch{trained}; {WHY})")
    more = found.needed - found.trained
    if found.trained > 0 and more >= 0.5:
        return (f"Not measured: the run was too short: it trained {clock_text(found.trained)} "
                f"on the clock and needed about {clock_text(more)} more ({WHY})")
    return (f"Not measured: the run was too short ({WHY}: it needed about {need} of "
            "training on the clock)")
