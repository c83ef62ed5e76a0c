"""The states of a run (and of each of its tasks): one set of names, written as they are in
run.json, shown by the views and mapped to exit codes by the command line."""

from __future__ import annotations

from enum import Enum


class RunState(str, Enum):
    READY = "ready"  # prepared, not started yet
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"  # a stop was asked for; the tasks are ending
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"
    LOST = "lost"  # no process of it is left and nothing wrote its end (a crash, a reboot)
    DETACHED = "detached"  # this dtgui let go of the run; it trains on, a watcher follows it
    UNKNOWN = "unknown"  # an old bundle without a record whose events say neither

    def __str__(self) -> str:  # the run.json name in f-strings and logs
        return str(self.value)

    @classmethod
    def named(cls, name: object) -> RunState:
        """The state called `name`; UNKNOWN for a name that is none (a newer dtgui's)."""
        try:
            return cls(name)
        except ValueError:
            return cls.UNKNOWN

    @property
    def ended(self) -> bool:
        """Over: finished, failed, stopped or lost (none of its processes is left)."""
        return self in ENDED

    @property
    def active(self) -> bool:
        """Started and not known to have ended."""
        return self in (RunState.STARTING, RunState.RUNNING, RunState.STOPPING)


ENDED = frozenset({RunState.FINISHED, RunState.FAILED, RunState.STOPPED, RunState.LOST})

# The message of a sweep trial's run its pruner stopped: its state is stopped, shown as "pruned"
# (its cause), never as a stop of the user's.
PRUNED_MESSAGE = "pruned by the sweep"
