"""A user's own training script as the supervisor's child (supervisor.py). No TensorFlow.

The script runs as ``python ENTRY ARGS`` in the bundle's ``project/``, with the task's
variables (script_env.py). Since it knows nothing of dtgui:

* its output is kept as it passes to the task's log, so a script that exits non-zero gets a
  ``failed`` event with its own last error line (the exception line of its traceback);
* the TensorBoard event files it writes become ``scalar`` events (tb_follow.py);
* so do the numbers it prints (``Epoch: 0, accuracy: 0.33, train_loss: 1.82.``, or the user's
  patterns: printed_metrics.py), on the main task (or every task, as the plan says), with
  ``progress`` events from ``Epoch 3/10`` and the like; a metric that TensorBoard files give
  too is taken from those alone;
* ``started`` and ``finished`` are written here.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

from .events import EventWriter
from .layout import task_dir_names
from .plan import BUNDLE_PROJECT_DIR, MetricsTasks, Plan, ScriptModel
from .printed_metrics import LOG_LINE, MAX_LINE, LineParser, LineResult, metric_name
from .script_env import expand_references, is_loss_tag, is_step_tag, task_paths
from .supervisor import Child
from .tb_follow import TensorBoardFollower
from .tfrecord import Scalar


def last_error_line(text: str, limit: int = 500) -> str:
    """The line a person acts on: the exception of the last traceback, its whole message
    (one of several lines is joined: `TypeError: Failed to convert elements of PerReplica:{`
    ... `}) with an unsupported type ... to a Tensor.`), else the last non-empty line. A
    message longer than `limit` keeps its first and last lines."""
    lines = [ln.rstrip() for ln in text.replace("\r", "\n").splitlines()]
    start = max((i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call")),
                default=-1)
    if start < 0:
        return next((ln.strip()[:limit] for ln in reversed(lines) if ln.strip()), "")
    # the frames are indented; the exception starts at the first line that is not
    first = next((i for i in range(start + 1, len(lines))
                  if lines[i].strip() and not lines[i].startswith((" ", "\t"))), None)
    if first is None:
        return ""
    message = [ln.strip() for ln in lines[first:] if ln.strip() and not LOG_LINE.match(ln)]
    joined = " ".join(message)
    if len(joined) <= limit or len(message) == 1:
        return joined[:limit]
    head, tail = message[0][:limit // 2], message[-1][-(limit // 2 - 5):]
    return f"{head} ... {tail}"


# Epochs a script ends after its stop signal (told by the times its TensorBoard files give
# them) that show it went on training: the epoch in flight may end, a whole one more may not.
WENT_ON_EPOCHS = 2


class ScriptChild(Child):
    title = "The script"
    capture_output = True
    # Asked to stop with SIGTERM, a script without a handler of its own ends at once, but
    # under MultiWorkerMirrored TensorFlow's preemption notifier takes SIGTERM (for
    # PreemptionCheckpointHandler) and training goes on. SIGINT, as Ctrl-C, raises Python's
    # KeyboardInterrupt: the script ends (every task must get it: one task's end alone leaves
    # the others waiting in their collectives until the grace is over).
    went_on_signal = signal.SIGINT

    def __init__(self, plan: Plan, plan_path: str, task: str, out_dir: str,
                 events: EventWriter) -> None:
        self.plan = plan
        self.script = plan.script or ScriptModel(BUNDLE_PROJECT_DIR, "")
        self.events = events
        self.out_dir = out_dir
        bundle_dir = os.path.dirname(plan_path)
        self.paths = task_paths(bundle_dir, out_dir, task)
        self.values = {k: v for k, v in os.environ.items() if k.startswith("DTGUI_")}
        self.values.update(self.paths)
        self.cwd = os.path.join(bundle_dir, self.script.project or BUNDLE_PROJECT_DIR)
        self.started_at = time.time()
        self.last_loss: float | None = None  # from TensorBoard files
        self.printed_loss: float | None = None
        self.last_step = 0
        self._stop_time: float | None = None  # when it was asked to stop
        self._epochs_after_stop: set[float] = set()  # epochs its TensorBoard files ended since
        self.parser = printed_parser(plan, self.script, task)
        self._pending = b""
        self._progress: tuple[str, int, int] | None = None
        self._epochs_total = 0  # what `Epoch 3/10` said (0: not said)
        self._steps_total = 0  # what `step 40/100` said (0: DTGUI_STEPS)
        self.follower = TensorBoardFollower(
            [self.paths["DTGUI_TENSORBOARD_DIR"], self.paths["DTGUI_OUTPUT_DIR"]],
            self._on_scalar,
            shared=[self.cwd, out_dir],  # where the script may write on its own (e.g. ./logs)
            skip=[os.path.join(out_dir, d) for d in ("tensorboard", "script", "checkpoints",
                                                     *task_dir_names())])

    def command(self) -> list[str]:
        return [sys.executable, self.script.entry,
                *(expand_references(a, self.values) for a in self.script.args)]

    def environment(self, env: dict[str, str]) -> None:
        for key in ("DTGUI_OUTPUT_DIR", "DTGUI_TENSORBOARD_DIR", "DTGUI_CHECKPOINT_DIR"):
            os.makedirs(self.paths[key], exist_ok=True)
        own = self.script.env
        for key, value in list(env.items()):
            if key in own and "$" in value:
                env[key] = expand_references(value, self.values)
        env.update(self.paths)

    def _on_scalar(self, tag: str, scalar: Scalar) -> None:
        self.events.emit("scalar", tag=tag, step=scalar.step, value=scalar.value,
                         wall_time=scalar.wall_time)
        self.last_step = max(self.last_step, scalar.step)
        stop_time = self._stop_time
        if stop_time is not None and not is_step_tag(tag) and scalar.wall_time > stop_time:
            self._epochs_after_stop.add(scalar.step)
        if is_loss_tag(tag):
            self.last_loss = scalar.value

    def output(self, data: bytes) -> None:
        if self.parser is None:
            return
        lines = (self._pending + data).replace(b"\r", b"\n").split(b"\n")
        self._pending = lines.pop()[-4 * MAX_LINE:]
        for raw in lines:
            self._read_line(raw.decode("utf-8", "replace"))

    def _read_line(self, line: str) -> None:
        assert self.parser is not None
        result = self.parser.feed(line)
        taken = {metric_name(tag) for tag in tuple(self.follower.last)}  # (one C-level copy)
        for reading in result.readings:
            if metric_name(reading.name) in taken:
                continue  # the TensorBoard files give it: once is enough
            step = int(reading.step) if reading.step.is_integer() else reading.step
            self.events.emit("scalar", tag=reading.name, step=step, value=reading.value,
                             source="printed", axis=reading.axis)
            if is_loss_tag(reading.name):
                self.printed_loss = reading.value
            if reading.axis == "step":
                self.last_step = max(self.last_step, int(reading.step))
        self._note_progress(result)

    def _note_progress(self, result: LineResult) -> None:
        """A `progress` event when what the line tells moves it: `Epoch 3/10`; an epoch's or
        a step's values (steps against DTGUI_STEPS)."""
        assert self.parser is not None
        progress = result.progress
        if progress is not None and progress[0] == "epoch":
            self._epochs_total = progress[2]
        elif progress is not None:
            self._steps_total = progress[2]
        if progress is None and result.readings:
            first = result.readings[0]
            if first.axis == "epoch":
                progress = ("epoch", self.parser.epochs_done(first.step), self._epochs_total)
            elif first.axis == "step":
                progress = ("step", int(first.step), self._steps_total or self.plan.steps)
        if progress is None or progress == self._progress:
            return
        self._progress = progress
        unit, done, total = progress
        self.events.emit("progress", unit=unit, done=done, total=total)

    def started(self, pid: int) -> None:
        self.started_at = time.time()
        self.follower.pid = pid
        env = os.environ
        self.events.emit(
            "started", replicas=int(env.get("DTGUI_REPLICAS_PER_TASK", "0") or 0),
            replica_ids=[], devices=[], strategy=str(self.plan.strategy),
            steps=self.plan.steps,
            global_batch=int(env.get("DTGUI_GLOBAL_BATCH", "0") or 0),
            versions={"python": sys.version.split()[0]}, pid=pid,
            supervisor_pid=os.getpid(), host=socket.gethostname(),
            script=" ".join(self.command()[1:]))
        self.follower.start()

    def asked_to_stop(self) -> None:
        # the scalars' own times, not when they are read: the files are read every half
        # second, and what a pipe buffers of printed lines comes later still
        self._stop_time = time.time()

    def went_on(self) -> bool:
        return len(self._epochs_after_stop) >= WENT_ON_EPOCHS

    def stopped(self) -> None:
        self.follower.stop(drain=False)

    def exited(self) -> None:
        self.follower.stop(drain=True)  # scalars first: a task seen ended has all its events
        if self.parser is not None and self._pending:
            self._read_line(self._pending.decode("utf-8", "replace"))
            self._pending = b""
        for problem in (self.parser.problems if self.parser is not None else [])[:3]:
            self.events.log(problem, level="warning")
        for problem in self.follower.problems[:3]:
            self.events.log(problem, level="warning")

    def outcome(self, code: int, output: str) -> int | None:
        if code != 0:
            return None
        loss = self.last_loss if self.last_loss is not None else self.printed_loss
        printed = {"loss_from": "printed"} if self.last_loss is None and loss is not None else {}
        self.events.emit("finished", steps=self.last_step, loss=loss, **printed,
                         seconds=round(time.time() - self.started_at, 3),
                         scalars=self.follower.count)
        return 0

    def failure(self, code: int, output: str) -> tuple[str, int]:
        line = last_error_line(output)
        error = f"{line} (the script exited with code {code})" if line \
            else f"The script exited with code {code}"
        return error, code if 0 < code < 128 else 1


def printed_parser(plan: Plan, script: ScriptModel, task: str) -> LineParser | None:
    """The reader of this task's printed lines: on the main task (the coordinator, else worker
    0) unless the script's metrics come from every task; None when nothing is read."""
    if not script.printed_metrics and not script.patterns:
        return None
    if script.metrics_tasks != MetricsTasks.ALL and task != main_task(plan, task):
        return None
    return LineParser(script.patterns, defaults=script.printed_metrics)


def main_task(plan: Plan, task: str) -> str:
    """The task whose numbers stand for the run: the chief (a coordinator), else worker 0."""
    ids = [t.task_id for t in plan.tasks] or [task]
    for wanted in ("chief:0", "worker:0"):
        if wanted in ids:
            return wanted
    return ids[0]
