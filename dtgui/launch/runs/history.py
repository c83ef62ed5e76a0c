"""Opening a run from the history: a finished run, shown from its local bundle.

The bundle under `runs_dir()` holds the events and logs of every task - local ones written
there, remote ones mirrored there as they were read - so a finished run is shown again
without connecting anywhere. Reading it blocks on the disk: call it off the UI thread.
"""

from __future__ import annotations

from collections.abc import Callable

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.events import read_all
from dtgui.core.live_run import LiveRun
from dtgui.core.measure.bottleneck import Verdict, plan_facts, verdict
from dtgui.core.measure.profile_answers import ENDED
from dtgui.core.runs.records import RunRecord
from dtgui.core.runs.run_state import RunState
from dtgui.launch.runs.run_source import BundledRun


class RunView(BundledRun):
    """An ended run as the UI follows it (`dtgui.launch.runs.run_source.RunSource`): nothing in it
    changes any more."""

    def __init__(self, record: RunRecord) -> None:
        self.record = record
        self.bundle = Bundle.open(record.bundle)
        plan = self.bundle.plan
        self.metrics = LiveRun(plan.steps, cpu_only=plan.device_kind == "cpu")
        if plan.machines or plan.is_multi_machine:
            for task in plan.tasks:
                self.metrics.set_task_machine(task.task_id, task.machine_name)
        for task in plan.tasks:
            self.metrics.add_events(read_all(self.bundle.events_file(task)))
            try:
                text = self.bundle.log_file(task).read_text(encoding="utf-8", errors="replace")
            except OSError:
                text = ""
            if text:
                self.metrics.add_log_lines(task.task_id, text.splitlines())
            state = self.metrics.snapshot().tasks.get(task.task_id)
            if state is None or state.status in ("starting", "running"):
                self.metrics.set_task_state(task.task_id, "stopped")
        self.state = record.state if record.state.ended else RunState.STOPPED
        self.message = record.message or f"run {self.state}"
        loss = self.metrics.final_loss()  # the one definition, from the events read back
        self.final_loss = loss if loss is not None else record.final_loss
        self.restarts = record.restarts
        self.max_restarts = record.max_restarts

    @property
    def finished(self) -> bool:
        return True

    def limit(self) -> Verdict:
        """What limited the run: its memory near a device's limit, else where its time went
        (each task's last split; dtgui.core.measure.bottleneck)."""
        snap = self.metrics.snapshot()
        return verdict(snap.splits.values(), plan_facts(self.bundle.plan),
                       snap.memory.devices())

    def request_stop(self) -> None:
        """Nothing runs any more."""

    def request_profile(self, steps: int, limit: float = 0.0,
                        said: Callable[[str], None] | None = None) -> str:
        return f"no profile: {ENDED}"

    def follow_closely(self, closely: bool) -> None:
        pass  # nothing in it changes any more

    def detach(self) -> None:
        """Nothing is followed."""


def open_run(record: RunRecord) -> RunView:
    return RunView(record)
