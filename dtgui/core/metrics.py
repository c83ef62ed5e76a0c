"""Aggregates a run's events into plot-ready buffers, shared between a reader thread and the UI.

The reader thread calls `add_events` / `add_log_lines` / `set_task_state`; the UI timer calls
`snapshot()` and redraws only when `version` changed. Series grow by doubling and are handed out
as numpy views of the filled part, so a snapshot copies nothing.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import islice

import numpy as np

from dtgui.core.events import STEP_KINDS, Event, StepRows, step_rows
from dtgui.core.scalars import ScalarStore

LOG_LINES_KEPT = 5000
GROUP_VALUES = 1 << 20  # step losses decoded before they are applied under the lock


class Series:
    """An append-only (x, y) series backed by numpy arrays that grow geometrically.

    Views handed out (`view`) are never written under the holder: appends go past their end
    and a growth or a rewind (`keep_up_to`) moves to new arrays. float32 halves the memory
    of long loss curves (the training program computes them in float32).
    """

    def __init__(self, capacity: int = 1024, dtype: type = np.float64) -> None:
        self._x: np.ndarray = np.empty(max(1, capacity), dtype=dtype)
        self._y: np.ndarray = np.empty(max(1, capacity), dtype=dtype)
        self.size = 0

    def reserve(self, capacity: int) -> None:
        """Room for `capacity` points in all (untouched memory costs nothing until written)."""
        if capacity > len(self._x):
            self._grow(capacity)

    def _grow(self, needed: int) -> None:
        capacity = max(needed, 2 * len(self._x))
        x = np.empty(capacity, dtype=self._x.dtype)
        y = np.empty(capacity, dtype=self._y.dtype)
        x[: self.size] = self._x[: self.size]
        y[: self.size] = self._y[: self.size]
        self._x, self._y = x, y

    def append(self, x: float, y: float) -> None:
        if self.size == len(self._x):
            self._grow(self.size + 1)
        self._x[self.size] = x
        self._y[self.size] = y
        self.size += 1

    def extend(self, xs: np.ndarray, ys: np.ndarray) -> None:
        n = len(xs)
        if n == 0:
            return
        if self.size + n > len(self._x):
            self._grow(self.size + n)
        self._x[self.size: self.size + n] = xs
        self._y[self.size: self.size + n] = ys
        self.size += n

    def keep_up_to(self, x: float) -> None:
        """Drop the points after `x` (x grows along the series), in new arrays so that the
        views already handed out keep their points."""
        keep = int(np.searchsorted(self._x[: self.size], x, side="right"))
        if keep < self.size:
            self._x, self._y = self._x.copy(), self._y.copy()
            self.size = keep

    def view(self) -> tuple[np.ndarray, np.ndarray]:
        return self._x[: self.size], self._y[: self.size]

    @property
    def last(self) -> float | None:
        return float(self._y[self.size - 1]) if self.size else None


@dataclass
class TaskState:
    task: str
    status: str = "starting"  # starting | running | finished | failed | stopped
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


class RunMetrics:
    def __init__(self, total_steps: int = 0) -> None:
        self._lock = threading.Lock()
        self.version = 0
        self.total_steps = total_steps
        self._t0: float | None = None
        self._t_last: float | None = None
        self._replica_loss: dict[int, Series] = {}
        self._throughput: dict[str, Series] = {}
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
        self._validation: dict[str, Series] = {}
        self._learning_rate = Series()
        self._models: list[dict[str, object]] = []
        self.scalars = ScalarStore()  # `scalar` events: a user's script's own numbers

    # -- writers (reader thread) --------------------------------------------------------
    def add_events(self, events: Iterable[Event]) -> None:
        """Apply events in order. Training steps are decoded outside the lock and applied
        in groups (consecutive batches of a task, up to GROUP_VALUES losses): reading back
        a run of a million steps is then a few hundred array copies rather than a Python
        loop per step and replica, and the UI's snapshot never waits long for the lock."""
        pending: dict[str, list[tuple[Event, StepRows]]] = {}
        held = 0
        for event in events:
            if event.kind in STEP_KINDS:
                rows = step_rows(event.data)
                if rows is None or not len(rows.steps):
                    continue
                group = pending.setdefault(event.task, [])
                if group and group[-1][1].replica_ids != rows.replica_ids:
                    self._apply_step_group(pending.pop(event.task))
                    group = pending.setdefault(event.task, [])
                group.append((event, rows))
                held += rows.losses.size
                if held >= GROUP_VALUES:
                    for task in list(pending):
                        self._apply_step_group(pending.pop(task))
                    held = 0
                continue
            if event.kind == "started" and event.task in pending:  # it may rewind the curves
                self._apply_step_group(pending.pop(event.task))
            with self._lock:
                self._apply(event)
                self.version += 1
        for task in list(pending):
            self._apply_step_group(pending.pop(task))

    def add_log_lines(self, task: str, lines: Iterable[str]) -> None:
        with self._lock:
            buf = self._logs.setdefault(task, deque(maxlen=LOG_LINES_KEPT))
            before = len(buf)
            lines = list(lines)
            buf.extend(lines)
            self._log_totals[task] = self._log_totals.get(task, 0) + len(lines)
            if len(buf) != before or buf.maxlen == before:
                self.version += 1

    def set_task_state(self, task: str, status: str, *, exit_code: int | None = None,
                       error: str = "") -> None:
        with self._lock:
            state = self._tasks.setdefault(task, TaskState(task))
            if state.status in ("failed", "finished") and status == "stopped":
                return
            state.status = status
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

    def _rewind(self, task: str, step: int, replica_ids: list) -> None:
        """A restarted task resumed from a checkpoint at `step`: its curves continue from
        there (the steps after it are trained again) instead of jumping back."""
        for rid in replica_ids:
            if int(rid) in self._replica_loss:
                self._replica_loss[int(rid)].keep_up_to(step)
        if task in self._throughput:
            self._throughput[task].keep_up_to(step)
        for series in (*self._validation.values(), self._learning_rate):
            series.keep_up_to(step)
        self._tasks[task].step = step
        self._step = max(t.step for t in self._tasks.values())

    def _apply_devices(self, event: Event) -> None:
        """Device samples. On one machine, a series per task and device ("worker:0 cpu0").
        In a multi-machine run, a series per machine and device ("h2 cpu0"): tasks sharing a
        machine see the same devices (NVML and the CPU load are machine-wide), so the first
        task reporting a device speaks for it until it ends; for the CPU, memory is the sum
        of the tasks' own memory on that machine."""
        t0 = self._t0 if self._t0 is not None else event.t  # _apply notes the time first
        elapsed = event.t - t0
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
                ended = owner is None or self._tasks.get(owner, TaskState(owner)).status in (
                    "finished", "failed", "stopped")
                if owner != event.task and not ended:
                    continue
                self._device_owner[label] = event.task
            if isinstance(util, (int, float)):
                self._device_util.setdefault(label, Series()).append(elapsed, float(util))
            if isinstance(used, (int, float)):
                self._device_mem.setdefault(label, Series()).append(elapsed, used / 2**20)

    def _apply_validation(self, event: Event) -> None:
        """Every MultiWorkerMirrored worker reports the same validation: kept once a step."""
        step = event.get("step")
        if not isinstance(step, int):
            return
        values = {"loss": event.get("loss"), **(event.get("metrics") or {})}
        for name, value in values.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            series = self._validation.setdefault(str(name), Series())
            if series.size and series.view()[0][-1] >= step:
                continue
            series.append(step, float(value))

    def _apply_step_group(self, group: list[tuple[Event, StepRows]]) -> None:
        """Consecutive step batches of one task, all of the same replicas."""
        last_event, last_rows = group[-1]
        ids = last_rows.replica_ids
        steps = np.concatenate([rows.steps for _, rows in group]).astype(np.float32)
        losses = np.concatenate([rows.losses for _, rows in group])
        by_replica = np.ascontiguousarray(losses.T)  # one contiguous row per replica
        all_finite = bool(np.isfinite(by_replica).all())
        rates = [(float(rows.steps[-1]), float(e.get("examples_per_sec")))
                 for e, rows in group if isinstance(e.get("examples_per_sec"), (int, float))]
        epoch = max(int(e.get("epoch", 0) or 0) for e, _ in group)
        rates_lr = [(float(rows.steps[-1]), float(e.get("lr")))
                    for e, rows in group if isinstance(e.get("lr"), (int, float))]
        with self._lock:
            for event, _ in group:
                self._note_time(event.t)
            state = self._tasks.setdefault(last_event.task, TaskState(last_event.task))
            state.step = int(last_rows.steps[-1])
            if state.status == "starting":
                state.status = "running"
            self._step = max(self._step, state.step)
            self._epoch = max(self._epoch, epoch)
            for rid, ys in zip(ids, by_replica, strict=False):
                series = self._replica_loss.get(rid)
                if series is None:
                    series = self._replica_loss[rid] = Series(dtype=np.float32)
                    series.reserve(self.total_steps)
                if all_finite:
                    series.extend(steps, ys)
                else:
                    finite = np.isfinite(ys)
                    series.extend(steps[finite], ys[finite])
            for x, lr in rates_lr:  # every task reports the same schedule: once a step
                seen = self._learning_rate.view()[0]
                if not len(seen) or seen[-1] < x:
                    self._learning_rate.append(x, lr)
            if rates:
                xs, ys = zip(*rates, strict=True)
                self._throughput.setdefault(last_event.task, Series()).extend(
                    np.array(xs), np.array(ys))
            self.version += 1

    def _note_time(self, t: float) -> None:
        if self._t0 is None:
            self._t0 = t
        if self._t_last is None or t > self._t_last:
            self._t_last = t

    def throughput_series(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        with self._lock:
            return {k: s.view() for k, s in self._throughput.items()}

    def _apply(self, event: Event) -> None:
        self._note_time(event.t)
        state = self._tasks.setdefault(event.task, TaskState(event.task))
        kind = event.kind
        if kind == "started":
            state.status = "running"
            state.replicas = int(event.get("replicas", 0) or 0)
            self.total_steps = int(event.get("steps", self.total_steps) or self.total_steps)
            resumed = event.get("resumed_from_step")
            if isinstance(resumed, int) and resumed < state.step:
                self._rewind(event.task, resumed, event.get("replica_ids") or [])
        elif kind == "epoch":
            values = {**event.data, **(event.get("metrics") or {})}
            self._epoch_metrics = {
                k: float(v) for k, v in values.items()
                if k not in ("v", "t", "steps") and isinstance(v, (int, float))
                and not isinstance(v, bool)
            }
        elif kind == "validation":
            self._apply_validation(event)
        elif kind == "model_saved":
            self._models.append({k: v for k, v in event.data.items() if k not in ("v", "kind")})
        elif kind == "device":
            self._apply_devices(event)
        elif kind == "scalar":  # dtgui.core.scalars: a script's numbers move the progress
            step, epoch = self.scalars.add(event)
            if step is not None and step > state.step:
                state.step, self._step = step, max(self._step, step)
            if epoch is not None:
                self._epoch = max(self._epoch, epoch)
        elif kind == "finished":
            state.status = "finished"
        elif kind == "failed":
            state.status = "failed"
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
                replica_loss={k: s.view() for k, s in sorted(self._replica_loss.items())},
                throughput={k: s.view() for k, s in self._throughput.items()},
                device_util={k: s.view() for k, s in self._device_util.items()},
                device_mem={k: s.view() for k, s in self._device_mem.items()},
                tasks={k: TaskState(**vars(v)) for k, v in self._tasks.items()},
                step=self._step,
                total_steps=self.total_steps,
                epoch=self._epoch,
                last_epoch_metrics=dict(self._epoch_metrics),
                stragglers={t: s.straggler for t, s in self._tasks.items() if s.straggler},
                validation={k: s.view() for k, s in self._validation.items()},
                learning_rate=self._learning_rate.view(),
                models=[dict(m) for m in self._models],
            )

    def log_lines(self, task: str) -> list[str]:
        with self._lock:
            return list(self._logs.get(task, ()))

    def event_span(self) -> float:
        """Seconds from the first event to the latest one (0 before two events)."""
        with self._lock:
            if self._t0 is None or self._t_last is None:
                return 0.0
            return max(0.0, self._t_last - self._t0)

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
