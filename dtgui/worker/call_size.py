"""How many training steps one call to the device runs (no TensorFlow here)."""

from __future__ import annotations


class StepsPerCall:
    """How many steps one call trains: the plan's number, or (0: automatic) as many as fit in
    about TARGET_SECONDS, so the call overhead vanishes while the dashboard still gets fresh
    steps at least twice a second. Bounded so that one event line stays under ~1 MB."""

    TARGET_SECONDS = 0.2
    MAX_STEPS = 10_000
    MAX_VALUES = 1 << 18  # steps x replicas in one event

    def __init__(self, fixed: int, replicas: int) -> None:
        self.fixed = max(0, int(fixed))
        self.limit = max(1, min(self.MAX_STEPS, self.MAX_VALUES // max(1, replicas)))
        self.k = min(self.fixed, self.limit) if self.fixed else 1
        self.proposal = float(self.k)
        self._observed = 0

    def next(self, done: int, total: int, *intervals: int, ends: tuple[int, ...] = ()) -> int:
        """Steps of the next call after `done`, ending at `total`, at the next multiple of
        each interval (checkpoints, validation: they happen between calls) and at each of the
        `ends` steps still ahead (a profile's capture starts and stops between calls)."""
        k = min(self.k, total - done)
        for every in intervals:
            if every > 0:
                k = min(k, every - done % every)
        for end in ends:
            if end > done:
                k = min(k, end - done)
        return max(1, k)

    def observe(self, seconds_per_step: float) -> None:
        """Time a call took per step; sets `proposal` (the size wanted for the next call)."""
        self._observed += 1
        if self.fixed or self._observed == 1 or seconds_per_step <= 0:
            return  # the first call also traces and compiles: not a measure of a step
        want = self.TARGET_SECONDS / seconds_per_step
        self.proposal = float(max(1, min(self.limit, self.k * 4, max(self.k // 4, want))))

    def agree(self, agreed: float) -> None:
        """The size every task takes (MultiWorkerMirrored: the mean of their proposals)."""
        if not self.fixed:
            self.k = int(max(1, min(self.limit, round(agreed))))
