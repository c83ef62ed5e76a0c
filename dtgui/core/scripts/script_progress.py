"""How far a user's own script is, from what it tells: its `progress` events (docs/bundle-format.md)
- the steps it prints against DTGUI_STEPS or a total it prints (`step 40/100`), or its epochs
(`Epoch 3/10`, or epochs counted from its per-epoch lines) - and the time left at that pace.
Pure Python; `RunCurves` holds one (the main task's).
"""

from __future__ import annotations

from dataclasses import dataclass

from dtgui.core.events import Event


@dataclass
class ScriptProgress:
    unit: str = ""  # "step" or "epoch" ("" before the script told anything)
    done: int = 0
    total: int = 0  # 0: not known
    started_at: float | None = None  # the script's start (its `started` event)
    done_at: float | None = None  # when `done` was told

    def add(self, event: Event) -> None:
        """A `progress` event of the main task."""
        unit, done, total = event.get("unit"), event.get("done"), event.get("total")
        if unit not in ("step", "epoch") or not isinstance(done, int):
            return
        if self.unit == "step" and unit == "epoch" and self.total:
            return  # steps against a total say more than epochs
        self.unit, self.done = unit, done
        self.total = total if isinstance(total, int) and total > 0 else 0
        self.done_at = event.t

    def start(self, t: float) -> None:
        """The script (re)started: its pace is measured from here."""
        self.started_at = t
        self.done, self.done_at = 0, None

    @property
    def fraction(self) -> float | None:
        if not self.total:
            return None
        return min(1.0, self.done / self.total)

    def seconds_left(self) -> float | None:
        """At the pace so far (from the script's start to its latest report), None when it
        cannot be told (no total, nothing done yet)."""
        if not self.total or self.done <= 0 or self.done_at is None or self.started_at is None:
            return None
        spent = self.done_at - self.started_at
        if spent <= 0:
            return None
        return max(0.0, spent / self.done * (self.total - self.done))

    def text(self) -> str:
        """What is done: "3 / 10 epochs", "400 / 1,000 steps", "3 epochs" ("" when it told
        nothing)."""
        if not self.unit:
            return ""
        return f"{self.done:,}" + (f" / {self.total:,}" if self.total else "") + \
            f" {self.unit}{'' if self.done == 1 and not self.total else 's'}"
