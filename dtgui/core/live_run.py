"""A live run's state for the views, shared between a reader thread and the UI.

The reader thread calls `add_events` / `add_log_lines` / `set_task_state`; the UI timer calls
`snapshot()` and redraws only when `version` changed. Every event is folded by the run's
`RunCurves` (dtgui.core.run_curves, the one reducer: curves, tasks, devices, logs); this holds
it under a lock and adds what the launcher knows (the tasks' exits, machines, stragglers, log
files). Series grow by doubling and are handed out as numpy views of the filled part, so a
snapshot copies nothing.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np

from dtgui.core.events import Event
from dtgui.core.measure.bottleneck import CpuLoad, StepSplit
from dtgui.core.measure.device_use import DeviceUse
from dtgui.core.measure.memory import MemoryPeaks
from dtgui.core.measure.split_wait import SplitWait
from dtgui.core.run_curves import RunCurves
from dtgui.core.run_tasks import TaskState
from dtgui.core.runs.run_state import RunState
from dtgui.core.scalars import ScalarStore
from dtgui.core.scripts.script_progress import ScriptProgress
from dtgui.core.series import Curve
from dtgui.core.step_groups import StepBatch, step_batches

__all__ = ["LiveRun", "Snapshot"]


@dataclass
class Snapshot:
    version: int
    replica_loss: dict[int, tuple[np.ndarray, np.ndarray]]
    throughput: dict[str, tuple[np.ndarray, np.ndarray]]
    device_util: dict[str, tuple[np.ndarray, np.ndarray]]
    device_mem: dict[str, tuple[np.ndarray, np.ndarray]]
    tasks: dict[str, TaskState]
    step: int
    total_steps: int
    epoch: int
    last_epoch_metrics: dict[str, float] = field(default_factory=dict)
    stragglers: dict[str, str] = field(default_factory=dict)  # task -> reason
    # validation loss ("loss") and metrics by name: (steps, values)
    validation: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    learning_rate: tuple[np.ndarray, np.ndarray] = (np.empty(0), np.empty(0))
    models: list[dict[str, object]] = field(default_factory=list)  # model_saved events
    script_progress: ScriptProgress = field(default_factory=ScriptProgress)  # a script's own
    splits: dict[str, StepSplit] = field(default_factory=dict)  # task -> its step's split
    split_deferred: dict[str, SplitWait] = field(default_factory=dict)  # task -> why no split
    loads: list[CpuLoad] = field(default_factory=list)  # each task's machine's CPU load
    memory: MemoryPeaks = field(default_factory=MemoryPeaks)  # each task's peak memory
    device_use: DeviceUse = field(default_factory=DeviceUse)  # utilisation, traffic
    gradient_bytes: int = 0  # what a step's all-reduce carries (0: not said)
    all_reduce_note: str = ""  # the gradients' compression, or why it fell back


# What TensorFlow prints when it looks for CUDA and finds none: on a CPU plan it says nothing
# (the task's log file keeps it; the Logs view and a failure's last lines leave it out).
GPU_PROBE_NOISE = re.compile(
    r"failed call to cuInit|Could not find cuda drivers on your machine|"
    r"All log messages before absl::InitializeLog\(\) is called|"
    r"Unable to register cu(?:DNN|FFT|BLAS) factory|"
    r"TensorFlow binary is optimized to use available CPU instructions|"
    r"To enable the following instructions: .* in other operations, rebuild TensorFlow")


class LiveRun:
    """The live run's whole state: its curves, tasks, devices and logs. `cpu_only`: a run on
    the CPU, whose logs leave out TensorFlow's search for CUDA (GPU_PROBE_NOISE)."""

    def __init__(self, total_steps: int = 0, *, cpu_only: bool = False) -> None:
        self.cpu_only = cpu_only
        self._lock = threading.Lock()
        self.version = 0
        self.curves = RunCurves(total_steps)

    @property
    def total_steps(self) -> int:
        return self.curves.total_steps

    @total_steps.setter
    def total_steps(self, steps: int) -> None:
        self.curves.total_steps = steps

    @property
    def scalars(self) -> ScalarStore:
        """`scalar` events: a user's script's own numbers."""
        return self.curves.scalars

    # -- writers (reader thread) --------------------------------------------------------
    def add_events(self, events: Iterable[Event]) -> None:
        """Fold events in order through the run's RunCurves. Training steps are decoded
        outside the lock and applied in batches (dtgui.core.step_groups.step_batches):
        reading back a run of a million steps is then a few hundred array copies rather than
        a Python loop per step and replica, and the UI's snapshot never waits long for the
        lock."""
        for item in step_batches(events):
            with self._lock:
                if isinstance(item, StepBatch):
                    self.curves.add_steps(item)
                else:
                    self.curves.add_event(item)
                self.version += 1

    def add_log_lines(self, task: str, lines: Iterable[str]) -> None:
        """A task's new log lines: TensorFlow's start-up messages folded away in the lines
        read (TaskLogs.add_output), its search for CUDA too on a CPU run (on a GPU plan that
        stays: it says why no GPU is used)."""
        with self._lock:
            if self.curves.logs.add_output(
                    task, lines, fold=GPU_PROBE_NOISE if self.cpu_only else None,
                    kept=None if self.cpu_only else GPU_PROBE_NOISE):
                self.version += 1

    def set_task_state(self, task: str, status: str, *, exit_code: int | None = None,
                       error: str = "") -> None:
        new = RunState.named(status)
        with self._lock:
            state = self.curves.tasks.of(task)
            if state.status in (RunState.FAILED, RunState.FINISHED) and new is RunState.STOPPED:
                return  # a task that ended on its own keeps its finished or failed
            state.status = new
            if exit_code is not None:
                state.exit_code = exit_code
            if error and not state.error:
                state.error = error
            self.version += 1

    # -- machines and stragglers --------------------------------------------------------
    def set_task_machine(self, task: str, machine: str) -> None:
        """Name the machine a task runs on (device curves are then labelled with it)."""
        with self._lock:
            self.curves.tasks.of(task).machine = machine
            self.version += 1

    def set_stragglers(self, stragglers: dict[str, str]) -> None:
        """task -> reason, for the tasks flagged as stragglers now (others are cleared)."""
        with self._lock:
            changed = False
            states = self.curves.tasks.states
            for task, state in states.items():
                reason = stragglers.get(task, "")
                if state.straggler != reason:
                    state.straggler, changed = reason, True
            for task, reason in stragglers.items():
                if task not in states:
                    states[task] = TaskState(task, straggler=reason)
                    changed = True
            if changed:
                self.version += 1

    def throughput_series(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        with self._lock:
            return self.curves.throughput_views()

    # -- readers (UI thread) -----------------------------------------------------------
    def snapshot(self) -> Snapshot:
        with self._lock:
            tasks, devices = self.curves.tasks, self.curves.devices
            return Snapshot(
                version=self.version,
                replica_loss={k: s.view() for k, s in sorted(self.curves.replica_loss.items())},
                throughput=self.curves.throughput_views(),
                device_util={k: s.view() for k, s in devices.util.items()},
                device_mem={k: s.view() for k, s in devices.mem.items()},
                tasks=tasks.copy_states(),
                step=tasks.step,
                total_steps=self.total_steps,
                epoch=tasks.epoch,
                last_epoch_metrics=dict(tasks.epoch_metrics),
                stragglers={t: s.straggler for t, s in tasks.states.items() if s.straggler},
                validation={k: s.view() for k, s in self.curves.validation.items()},
                learning_rate=self.curves.learning_rate.view(),
                models=[dict(m) for m in tasks.models],
                script_progress=replace(self.curves.script_progress),
                splits=dict(self.curves.splits),
                split_deferred=dict(self.curves.split_deferred),
                loads=self.curves.cpu_loads(),
                memory=self.curves.memory.copy(),
                device_use=self.curves.device_use.copy(),
                gradient_bytes=self.curves.gradient_bytes,
                all_reduce_note=self.curves.all_reduce_note,
            )

    def log_lines(self, task: str) -> list[str]:
        with self._lock:
            return self.curves.logs.lines(task)

    def event_span(self) -> float:
        """Seconds from the first event to the latest one (0 before two events)."""
        with self._lock:
            return self.curves.span()

    def training_span(self) -> float:
        """The event span without the time it was stopped before a resume
        (RunCurves.training_span)."""
        with self._lock:
            return self.curves.training_span()

    def progress(self) -> ScriptProgress:
        """How far the run is (RunCurves.progress), without a whole snapshot's copies."""
        with self._lock:
            return self.curves.progress()

    def final_loss(self) -> float | None:
        """The run's final loss (RunCurves.final_loss: the one definition)."""
        with self._lock:
            return self.curves.final_loss()

    def best_validation(self) -> tuple[str, float] | None:
        """The validation value the run is listed with so far (RunCurves.best_validation)."""
        with self._lock:
            return self.curves.best_validation()

    def loss_curve(self) -> Curve:
        """The mean training loss by step (RunCurves.loss_curve)."""
        with self._lock:
            return self.curves.loss_curve()

    def versions(self) -> dict[str, str]:
        """The training program's versions (TensorFlow, Keras...), as its tasks said."""
        with self._lock:
            return dict(self.curves.versions)

    def log_lines_since(self, task: str, seen: int,
                        raw: bool = False) -> tuple[list[str], int]:
        """The lines of `task` (as read; `raw`: as written) added after the first `seen`
        ones, and how many were ever added (TaskLogs.since: fewer than `total - seen` when
        some were dropped)."""
        with self._lock:
            return self.curves.logs.since(task, seen, raw)

    def log_folded(self, task: str) -> int:
        """How many of the task's lines are folded away in the lines read."""
        with self._lock:
            return self.curves.logs.folded(task)

    def log_tasks(self) -> list[str]:
        with self._lock:
            return self.curves.logs.tasks()
