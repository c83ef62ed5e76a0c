"""TensorFlow's profiler over the plan's profile steps, on every task of dtgui's loop.

Each task traces its own process from the first profile step to the last (the calls are cut
there: `call_size.StepsPerCall.next`'s ends), so MultiWorkerMirrored workers, which train
the same calls, capture the same steps. The trace goes where TensorBoard's profile plugin
reads it: under the task's TensorBoard folder, `output/tensorboard/<task>/plugins/profile/
<time>/<host>.xplane.pb` (one TensorBoard run a task, so tasks on one host do not mix).

Under parameter_server the workers only serve the calls their coordinator schedules: the
coordinator captures them (`ClusterCapture`) through the profiler service every
`tf.distribute.Server` already runs on its task's port, so nothing is started for it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

import tensorflow as tf

from .events import EventWriter
from .layout import tensorboard_dir
from .profile_request import STEP_MARK

# After asking the workers for their traces, the coordinator waits this long before it
# schedules the first profiled call: the request crosses the network and each worker starts
# its profiler session (measured: docs/performance.md)
WORKER_LEAD_SECONDS = 0.2
# How long a worker's trace lasts, over the time the profiled steps are expected to take
# (the estimate is the last calls' pace: the workers' traces must not end before the steps)
TRACE_MARGIN = 1.5
MIN_TRACE_SECONDS = 2.0
MAX_TRACE_SECONDS = 600.0


class ProfileCapture:
    """Starts the profiler before the call that trains step `first` and stops it after the
    call that reaches `last` (both included); says what the capture took and where it is."""

    def __init__(self, out_dir: str, task: str, first: int, last: int,
                 events: EventWriter) -> None:
        self.first, self.last = first, last
        self.logdir = tensorboard_dir(out_dir, task)
        self.events = events
        self.active = False
        self._started_seconds = 0.0

    @property
    def busy(self) -> bool:
        """Capturing now (another capture asked meanwhile is not made)."""
        return self.active

    @property
    def ends(self) -> tuple[int, ...]:
        """The steps after which a call must end: before the first profiled step, the last."""
        return (self.first - 1, self.last)

    def before(self, step: int) -> None:
        """The next call trains from `step`: start the capture when it is the first."""
        if step != self.first or self.active:
            return
        began = time.perf_counter()
        try:
            tf.profiler.experimental.start(self.logdir)
        except Exception as exc:  # noqa: BLE001 - a capture only; training goes on
            self.events.log(f"profile: TensorFlow's profiler did not start: {exc}",
                            level="warning")
            return
        self.active = True
        self._started_seconds = time.perf_counter() - began

    def marked(self, step: int, last: int) -> Any:
        """Around a call of steps `step`..`last`: while capturing, TensorFlow's step marker
        (XProf's step tools count the call as a step; dtgui reads the input share of the
        marked calls from the trace: dtgui.core.measure.profile_input)."""
        if not self.active:
            return contextlib.nullcontext()
        return tf.profiler.experimental.Trace(STEP_MARK, step_num=step, last_step=last, _r=1)

    def after(self, done: int, final: bool = False) -> None:
        """Training reached step `done`: stop the capture at (or past) the last step, or at
        `done` when training ends there (a stop)."""
        if not self.active or (done < self.last and not final):
            return
        stopped = self._stop()
        if stopped is None:
            return
        self.events.log(f"profile: steps {self.first}-{min(done, self.last)} captured in "
                        f"{os.path.join(self.logdir, 'plugins', 'profile')} (starting the "
                        f"profiler took {self._started_seconds:.2f} s, writing the trace "
                        f"{stopped:.2f} s)")

    def _stop(self) -> float | None:
        """Stop this process's capture: the seconds writing its trace took (None: failed)."""
        began = time.perf_counter()
        self.active = False
        try:
            tf.profiler.experimental.stop()
        except Exception as exc:  # noqa: BLE001 - a capture only; training goes on
            self.events.log(f"profile: TensorFlow's profiler did not stop: {exc}",
                            level="warning")
            return None
        return time.perf_counter() - began


class ClusterCapture(ProfileCapture):
    """The parameter_server coordinator's capture of itself and of its workers over steps
    `first`..`last`: its own profiler from the first profiled call to the last one fetched,
    and each worker's through that worker's profiler service, for a span of time (the
    service takes no stop) sized on the pace of the calls before.

    The coordinator drains its calls before `start` and after the last profiled one, so the
    workers trace those calls from their first; a worker's trace goes on for the rest of its
    span while training goes on (the message says how long). Each worker writes its trace
    itself, in the folder named relative to its own bundle directory (tasks run there, with
    `--out output`): `output/tensorboard/worker-<i>/plugins/profile/`."""

    def __init__(self, out_dir: str, task: str, first: int, last: int, events: EventWriter,
                 workers: list[str]) -> None:
        super().__init__(out_dir, task, first, last, events)
        self.workers = {f"worker:{i}": address for i, address in enumerate(workers)}
        self._out_dir = out_dir
        self._threads: list[threading.Thread] = []
        self._failed: dict[str, str] = {}
        self._trace_seconds = 0.0
        self._began = 0.0
        self._took = 0.0
        self._reached = 0
        self._own = False  # this process's own trace was started
        self.open = False  # between the first profiled call and the last one fetched
        self.pending = False  # the workers' traces are still being taken or written

    def start(self, step: int, seconds_per_step: float) -> None:
        """The next call trains from `step` and the workers are idle: when it is the first,
        ask every worker for a trace long enough for the profiled steps at this pace, start
        this process's own, and give the workers' a head start."""
        if step != self.first or self.open or self.pending:
            return
        expected = (self.last - self.first + 1) * max(0.0, seconds_per_step)
        self._trace_seconds = min(MAX_TRACE_SECONDS, max(
            MIN_TRACE_SECONDS, WORKER_LEAD_SECONDS + TRACE_MARGIN * expected))
        self._failed = {}
        self._threads = [threading.Thread(target=self._trace_worker, args=(task, address),
                                          name=f"dtgui-profile-{task}", daemon=True)
                         for task, address in self.workers.items()]
        for thread in self._threads:
            thread.start()
        self.open = self.pending = True
        self.before(step)
        self._own = self.active
        time.sleep(WORKER_LEAD_SECONDS)
        self._began = time.perf_counter()

    def _trace_worker(self, task: str, address: str) -> None:
        logdir = tensorboard_dir(self._out_dir, task)
        inside = os.path.relpath(logdir)
        if not inside.startswith(os.pardir):  # the worker resolves it from its bundle folder
            logdir = inside
        try:
            tf.profiler.experimental.client.trace(f"grpc://{address}", logdir,
                                                  int(self._trace_seconds * 1000))
        except Exception as exc:  # noqa: BLE001 - a capture only; training goes on
            self._failed[task] = str(exc).strip().splitlines()[0] if str(exc).strip() \
                else type(exc).__name__

    @property
    def busy(self) -> bool:
        """Capturing, or the workers' traces are still being taken."""
        return self.open or self.pending

    def marked(self, step: int, last: int) -> Any:
        """The coordinator's calls are scheduled, not run, here: no step marker."""
        return contextlib.nullcontext()

    def after(self, done: int, final: bool = False) -> None:
        """The calls through step `done` are fetched: at (or past) the last profiled step, or
        at the end of training, stop this process's capture; the workers' end on their own
        (`settle`)."""
        if not self.open or (done < self.last and not final):
            return
        self.open = False
        self._took = time.perf_counter() - self._began
        self._reached = min(done, self.last)
        if self.active:
            self._stop()

    def settle(self, wait: bool = False) -> None:
        """Once every worker's trace is written (`wait`: wait for them), say what was
        captured, and where."""
        if not self.pending or self.open:
            return
        for thread in self._threads:
            if wait:
                thread.join()
            if thread.is_alive():
                return
        self.pending = False
        tasks = ", ".join([*([os.path.basename(self.logdir)] if self._own else []),
                           *(t.replace(":", "-") for t in self.workers if t not in self._failed)])
        for task, error in sorted(self._failed.items()):
            self.events.log(f"profile: {task} gave no trace: {error}", level="warning")
        if not tasks:
            self.events.log("profile: no task's trace was written", level="warning")
            return
        where = os.path.join(os.path.dirname(self.logdir), f"{{{tasks}}}", "plugins", "profile")
        covered = self._trace_seconds - WORKER_LEAD_SECONDS
        traced = len(self.workers) - len(self._failed)
        self.events.log(f"profile: steps {self.first}-{self._reached} captured in {where} "
                        f"({'the coordinator and ' if self._own else ''}{traced} "
                        f"worker{'s' if traced != 1 else ''}; the steps took "
                        f"{self._took:.2f} s, the workers' traces {self._trace_seconds:.2f} s "
                        f"from {WORKER_LEAD_SECONDS:g} s before them)")
        if self._took > covered:
            self.events.log(f"profile: the steps took longer than the workers' traces "
                            f"({self._took:.2f} s against {covered:.2f} s): their traces miss "
                            f"the last of them", level="warning")
