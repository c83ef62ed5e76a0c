"""A stop asked of the training process, seen between its calls to the device. No TensorFlow.

TensorFlow can hold the main thread in one device call for as long as the call takes, so a
signal only sets a flag here; the training loop reads it after each call, saves a checkpoint
at the step it reached and ends (progress.py). The supervisor relays every stop to its child
as RELAY_SIGNAL: under MultiWorkerMirrored, TensorFlow's preemption notifier takes SIGTERM in
the training process for itself, and no TensorFlow code claims SIGUSR1. SIGUSR1 is also what
a Slurm job asks for ahead of its time limit (job.sbatch's ``--signal``).

Exit codes of a stopped training process: STOPPED_EXIT once it has written its ``stopped``
event (a checkpoint saved or not needed); anything else and the supervisor writes it.
"""

from __future__ import annotations

import signal
from typing import Any

RELAY_SIGNAL = signal.SIGUSR1
# How long a training process has, once asked to stop, to reach the end of its device call,
# save and end; then its supervisor kills it. What stops a task (the launcher, run.sh, Slurm's
# KillWait) waits TASK_STOP_SECONDS before it kills: longer, so that the supervisor outlives
# its child and reports its end.
STOP_GRACE_SECONDS = 20.0
TASK_STOP_SECONDS = 30
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, RELAY_SIGNAL)
STOPPED_EXIT = 143


class StopRequest:
    """Set by the first stop signal; `requested` is read by the training loop."""

    def __init__(self) -> None:
        self.signal = 0

    def install(self) -> StopRequest:
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._note)
        return self

    def _note(self, sig: int, _frame: Any) -> None:
        if not self.signal:
            self.signal = sig

    @property
    def requested(self) -> bool:
        return self.signal != 0

    def flag(self) -> float:
        """1.0 when a stop is asked, else 0.0 (the value the workers add up to agree)."""
        return 1.0 if self.signal else 0.0


def stop_reason(sig: int) -> str:
    """Why this task stops: its own signal, or (0) another worker's (they agree on it)."""
    if not sig:
        return "another task was stopped"
    if sig == RELAY_SIGNAL:
        return "asked to stop"
    return f"{signal.Signals(sig).name}"


def stopped_message(step: int, saved: bool, why: str) -> str:
    kept = f"the checkpoint of step {step} is saved" if saved else \
        "no checkpoint is saved (no step was trained since the last one)"
    return f"stopped at step {step} ({why}): {kept}"
