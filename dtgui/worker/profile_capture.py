"""TensorFlow's profiler over the plan's profile steps, on every task of dtgui's loop.

Each task traces its own process from the first profile step to the last (the calls are cut
there: `call_size.StepsPerCall.next`'s ends), so MultiWorkerMirrored workers, which train
the same calls, capture the same steps. The trace goes where TensorBoard's profile plugin
reads it: under the task's TensorBoard folder, `output/tensorboard/<task>/plugins/profile/
<time>/<host>.xplane.pb` (one TensorBoard run a task, so tasks on one host do not mix).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import tensorflow as tf

from .events import EventWriter


class ProfileCapture:
    """Starts the profiler before the call that trains step `first` and stops it after the
    call that reaches `last` (both included); says what the capture took and where it is."""

    def __init__(self, out_dir: str, task: str, first: int, last: int,
                 events: EventWriter) -> None:
        self.first, self.last = first, last
        self.logdir = os.path.join(out_dir, "tensorboard", task.replace(":", "-"))
        self.events = events
        self.active = False
        self._started_seconds = 0.0

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

    def marked(self, step: int) -> Any:
        """Around a call from `step`: while capturing, TensorFlow's step marker (XProf's step
        tools, the input pipeline's analysis among them, count the call as a step)."""
        if not self.active:
            return contextlib.nullcontext()
        return tf.profiler.experimental.Trace("train", step_num=step, _r=1)

    def after(self, done: int, final: bool = False) -> None:
        """Training reached step `done`: stop the capture at (or past) the last step, or at
        `done` when training ends there (a stop)."""
        if not self.active or (done < self.last and not final):
            return
        began = time.perf_counter()
        self.active = False
        try:
            tf.profiler.experimental.stop()
        except Exception as exc:  # noqa: BLE001 - a capture only; training goes on
            self.events.log(f"profile: TensorFlow's profiler did not stop: {exc}",
                            level="warning")
            return
        stopped = time.perf_counter() - began
        self.events.log(f"profile: steps {self.first}-{min(done, self.last)} captured in "
                        f"{os.path.join(self.logdir, 'plugins', 'profile')} (starting the "
                        f"profiler took {self._started_seconds:.2f} s, writing the trace "
                        f"{stopped:.2f} s)")
