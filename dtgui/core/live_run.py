"""A live run's state for the views, shared between a reader thread and the UI.

The reader thread calls `add_events` / `add_log_lines` / `set_task_state`; the UI timer calls
`snapshot()` and redraws only when `version` changed. The curves are folded by the run's
`RunCurves` (dtgui.core.run_curves, the one reducer of events into curves); this adds the
tasks' states, devices, epochs, saved models and logs. Series grow by doubling and are handed
out as numpy views of the filled part, so a snapshot copies nothing.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from itertools import islice

import numpy as np

from dtgui.core.events import Event
from dtgui.core.measure.bottleneck import CpuLoad, StepSplit
from dtgui.core.measure.device_use import DeviceUse
from dtgui.core.measure.memory import MemoryPeaks
from dtgui.core.run_curves import (
    GROUP_VALUES,
    Curve,
    RunCurves,
    Series,
    StepBatch,
    series_of,
    step_batches,
)
from dtgui.core.runs.run_state import RunState
from dtgui.core.scalars import ScalarStore
from dtgui.core.scripts.script_progress import ScriptProgress

__all__ = ["GROUP_VALUES", "LOG_LINES_KEPT", "LiveRun", "Series", "Snapshot", "TaskState"]

LOG_LINES_KEPT = 5000


@dataclass
class TaskState:
    task: str
    status: RunState = RunState.STARTING  # starting, running, finished, failed or stopped
    step: int = 0
    replicas: int = 0
    error: str = ""
    exit_code: int | None = None
    machine: str = ""  # where the task runs ("" = this machine)
    straggler: str = ""  # why it is flagged as a straggler ("" = it is not)


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
    split_deferred: dict[str, float] = field(default_factory=dict)  # task -> measured from (s)
    loads: list[CpuLoad] = field(default_factory=list)  # each task's machine's CPU load
    memory: MemoryPeaks = field(default_factory=MemoryPeaks)  # each task's peak memory
    device_use: DeviceUse = field(default_factory=DeviceUse)  # utilisation, traffic
    gradient_bytes: int = 0  # what a step's all-reduce carries (0: not said)


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
        self._device_util: dict[str, Series] = {}
        self._device_mem: dict[str, Series] = {}
        self._tasks: dict[str, TaskState] = {}
        self._logs: dict[str, deque[str]] = {}
        self._log_totals: dict[str, int] = {}
        self._step = 0
        self._epoch = 0
        self._epoch_metrics: dict[str, float] = {}
        self._machines: dict[str, str] = {}  # task -> machine (multi-machine runs)
        self._device_owner: dict[str, str] = {}  # "machine device" -> the task reporting it
        self._cpu_mem: dict[str, dict[str, float]] = {}  # machine -> task -> its memory
        self._models: list[dict[str, object]] = []

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
        """Apply events in order. Training steps are decoded outside the lock and applied
        in batches (dtgui.core.run_curves.step_batches): reading back a run of a million steps
        is then a few hundred array copies rather than a Python loop per step and replica,
        and the UI's snapshot never waits long for the lock."""
        for item in step_batches(events):
            with self._lock:
                if isinstance(item, StepBatch):
                    self._apply_steps(item)
                else:
                    self._apply(item)
                self.version += 1

    def add_log_lines(self, task: str, lines: Iterable[str]) -> None:
        lines = [ln for ln in lines if not (self.cpu_only and GPU_PROBE_NOISE.search(ln))]
        with self._lock:
            buf = self._logs.setdefault(task, deque(maxlen=LOG_LINES_KEPT))
            before = len(buf)
            buf.extend(lines)
            self._log_totals[task] = self._log_totals.get(task, 0) + len(lines)
            if len(buf) != before or buf.maxlen == before:
                self.version += 1

    def set_task_state(self, task: str, status: str, *, exit_code: int | None = None,
                       error: str = "") -> None:
        new = RunState.named(status)
        with self._lock:
            state = self._tasks.setdefault(task, TaskState(task))
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
            self._machines[task] = machine
            self._tasks.setdefault(task, TaskState(task)).machine = machine
            self.version += 1

    def set_stragglers(self, stragglers: dict[str, str]) -> None:
        """task -> reason, for the tasks flagged as stragglers now (others are cleared)."""
        with self._lock:
            changed = False
            for task, state in self._tasks.items():
                reason = stragglers.get(task, "")
                if state.straggler != reason:
                    state.straggler, changed = reason, True
            for task, reason in stragglers.items():
                if task not in self._tasks:
                    self._tasks[task] = TaskState(task, straggler=reason,
                                                  machine=self._machines.get(task, ""))
                    changed = True
            if changed:
                self.version += 1

    def _apply_devices(self, event: Event) -> None:
        """Device samples. On one machine, a series per task and device ("worker:0 cpu0").
        In a multi-machine run, a series per machine and device ("h2 cpu0"): tasks sharing a
        machine see the same devices (NVML and the CPU load are machine-wide), so the first
        task reporting a device speaks for it until it ends; for the CPU, memory is the sum
        of the tasks' own memory on that machine."""
        t0 = self.curves.t_first  # _apply notes the time first
        elapsed = event.t - (t0 if t0 is not None else event.t)
        machine = self._machines.get(event.task, "")
        for dev in event.get("devices") or []:
            name = f"{dev.get('kind', '?')}{dev.get('index', 0)}"
            used = dev.get("mem_used")
            util = dev.get("util")
            if not machine:
                label = f"{event.task} {name}"
            else:
                label = f"{machine} {name}"
                if dev.get("kind") == "cpu" and isinstance(used, (int, float)):
                    rss = self._cpu_mem.setdefault(machine, {})
                    rss[event.task] = float(used)
                    used = sum(rss.values())
                owner = self._device_owner.get(label)
                ended = owner is None or self._tasks.get(owner, TaskState(owner)).status.ended
                if owner != event.task and not ended:
                    continue
                self._device_owner[label] = event.task
            if isinstance(util, (int, float)):
                series_of(self._device_util, label).append(elapsed, float(util))
            if isinstance(used, (int, float)):
                series_of(self._device_mem, label).append(elapsed, used / 2**20)

    def _apply_steps(self, batch: StepBatch) -> None:
        """Consecutive step calls of one task: its progress, then its curves."""
        state = self._tasks.setdefault(batch.task, TaskState(batch.task))
        state.step = batch.last_step
        if state.status is RunState.STARTING:
            state.status = RunState.RUNNING
        self._step = max(self._step, state.step)
        self._epoch = max(self._epoch, batch.epoch)
        self.curves.add_steps(batch)

    def throughput_series(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        with self._lock:
            return self.curves.throughput_views()

    def _apply(self, event: Event) -> None:
        state = self._tasks.setdefault(event.task, TaskState(event.task))
        kind = event.kind
        if kind == "scalar":  # dtgui.core.scalars: a script's numbers move the progress
            step, epoch = self.curves.add_scalar(event)
            if step is not None and step > state.step:
                state.step, self._step = step, max(self._step, step)
            if epoch is not None:
                self._epoch = max(self._epoch, epoch)
            return
        rewound = self.curves.add_event(event)  # the curves, the final loss, the times
        if kind == "started":
            state.status = RunState.RUNNING
            state.replicas = int(event.get("replicas", 0) or 0)
            if rewound:  # resumed from a checkpoint: the steps after it are trained again
                state.step = int(event.get("resumed_from_step"))
                self._step = max(t.step for t in self._tasks.values())
        elif kind == "epoch":
            values = {**event.data, **(event.get("metrics") or {})}
            self._epoch_metrics = {
                k: float(v) for k, v in values.items()
                if k not in ("v", "t", "steps") and isinstance(v, (int, float))
                and not isinstance(v, bool)
            }
        elif kind == "progress" and event.get("unit") == "epoch":  # a script's epochs
            done = event.get("done")
            if isinstance(done, int):
                self._epoch = max(self._epoch, done)
        elif kind == "model_saved":
            self._models.append({k: v for k, v in event.data.items() if k not in ("v", "kind")})
        elif kind == "device":
            self._apply_devices(event)
        elif kind == "finished":
            state.status = RunState.FINISHED
        elif kind == "failed":
            state.status = RunState.FAILED
            # The first cause wins: a task seen hung (SIGSTOP) and then resumed by the stop's
            # SIGCONT reports a follow-on error ("lost contact") that must not replace it.
            if not state.error:
                state.error = str(event.get("error", "failed"))
        elif kind == "log":
            buf = self._logs.setdefault(event.task, deque(maxlen=LOG_LINES_KEPT))
            buf.append(f"[{event.get('level', 'info')}] {event.get('message', '')}")
            self._log_totals[event.task] = self._log_totals.get(event.task, 0) + 1

    # -- readers (UI thread) -----------------------------------------------------------
    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(
                version=self.version,
                replica_loss={k: s.view() for k, s in sorted(self.curves.replica_loss.items())},
                throughput=self.curves.throughput_views(),
                device_util={k: s.view() for k, s in self._device_util.items()},
                device_mem={k: s.view() for k, s in self._device_mem.items()},
                tasks={k: TaskState(**vars(v)) for k, v in self._tasks.items()},
                step=self._step,
                total_steps=self.total_steps,
                epoch=self._epoch,
                last_epoch_metrics=dict(self._epoch_metrics),
                stragglers={t: s.straggler for t, s in self._tasks.items() if s.straggler},
                validation={k: s.view() for k, s in self.curves.validation.items()},
                learning_rate=self.curves.learning_rate.view(),
                models=[dict(m) for m in self._models],
                script_progress=replace(self.curves.script_progress),
                splits=dict(self.curves.splits),
                split_deferred=dict(self.curves.split_deferred),
                loads=self.curves.cpu_loads(),
                memory=self.curves.memory.copy(),
                device_use=self.curves.device_use.copy(),
                gradient_bytes=self.curves.gradient_bytes,
            )

    def log_lines(self, task: str) -> list[str]:
        with self._lock:
            return list(self._logs.get(task, ()))

    def event_span(self) -> float:
        """Seconds from the first event to the latest one (0 before two events)."""
        with self._lock:
            return self.curves.span()

    def final_loss(self) -> float | None:
        """The run's final loss (RunCurves.final_loss: the one definition)."""
        with self._lock:
            return self.curves.final_loss()

    def loss_curve(self) -> Curve:
        """The mean training loss by step (RunCurves.loss_curve)."""
        with self._lock:
            return self.curves.loss_curve()

    def versions(self) -> dict[str, str]:
        """The training program's versions (TensorFlow, Keras...), as its tasks said."""
        with self._lock:
            return dict(self.curves.versions)

    def log_lines_since(self, task: str, seen: int) -> tuple[list[str], int]:
        """The lines of `task` added after the first `seen` ones, and how many were ever added.

        Only the last LOG_LINES_KEPT lines are kept: when more than that arrived since `seen`,
        fewer lines than `total - seen` come back (the caller can say some were dropped).
        """
        with self._lock:
            buf = self._logs.get(task)
            total = self._log_totals.get(task, 0)
            if not buf or total <= seen:
                return [], total
            new = min(total - seen, len(buf))
            return list(islice(buf, len(buf) - new, None)), total

    def log_tasks(self) -> list[str]:
        with self._lock:
            return sorted(self._logs)
