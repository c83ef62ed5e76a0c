"""What every view of a run reads: the one protocol a shown run implements.

A run on screen is either live (`dtgui.launch.controller.RunController`: tasks on this machine,
on registered machines, or both) or over (`dtgui.launch.runs.history.RunView`: read back from its
local bundle). Views (the dashboard, notifications, the main window) and `RunSession` read only
what is declared here, so neither kind is ever probed for attributes it may lack. Every member
is an in-memory value: reading one never blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from dtgui.core.plans.plan import Plan
from dtgui.core.runs.run_state import RunState

if TYPE_CHECKING:  # the main window imports this protocol before any run (and numpy) exists
    from dtgui.core.bundles.bundle import Bundle
    from dtgui.core.live_run import LiveRun
    from dtgui.core.runs.records import RunRecord


class RunSource(Protocol):
    """A run as the UI follows it."""

    @property
    def state(self) -> RunState:
        """Ready, running, stopping; then finished, failed, stopped or detached."""

    @property
    def message(self) -> str:
        """What the run says now: why it failed, a straggler, a restart."""

    @property
    def finished(self) -> bool:
        """Over: state and message no longer change (read it before them)."""

    @property
    def restarts(self) -> int:
        """Restarts from the last checkpoint so far."""

    @property
    def max_restarts(self) -> int:
        """Restarts the run's failure policy allows (0: a failure ends the run)."""

    @property
    def final_loss(self) -> float | None:
        """The run's final loss (RunCurves.final_loss; None before the first step)."""

    @property
    def metrics(self) -> LiveRun:
        """Curves, task states and logs, filled as events arrive."""

    @property
    def bundle(self) -> Bundle:
        """The run's local bundle (its mirror, for a run on other machines)."""

    @property
    def plan(self) -> Plan:
        """The plan the run was started from."""

    @property
    def run_name(self) -> str:
        """The plan's run name."""

    @property
    def output_dir(self) -> Path:
        """The local bundle's output folder (events, logs, the trained model)."""

    @property
    def record(self) -> RunRecord | None:
        """The run's record in the history (None for a run started outside the app)."""

    def request_stop(self) -> None:
        """Stop every task (returns at once; an ended run ignores it)."""

    def request_profile(self, steps: int, limit: float = ...,
                        said: Callable[[str], None] | None = None) -> str:
        """Capture TensorFlow's profiler on every task over its next `steps` steps; blocks
        until the traces are written (call it off the UI thread). Returns the outcome in a
        sentence ("profile written", or why not); `said` hears "profiling steps A-B..."."""

    def detach(self) -> None:
        """Stop following the run; its tasks keep running (an ended run ignores it)."""

    def follow_closely(self, closely: bool) -> None:
        """Read the run as often as it can be (it is shown), or less often (followed among
        others, not shown); an ended run ignores it."""


class BundledRun:
    """What a run reads off its bundle, written once for every kind of run (live, ended, a
    test's stand-in): the plan, its name and the output folder."""

    bundle: Bundle

    @property
    def plan(self) -> Plan:
        return self.bundle.plan

    @property
    def run_name(self) -> str:
        return self.bundle.plan.run_name

    @property
    def output_dir(self) -> Path:
        return self.bundle.output
