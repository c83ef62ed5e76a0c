"""A user's own training script as the supervisor's child (supervisor.py). No TensorFlow.

The script runs as ``python ENTRY ARGS`` in the bundle's ``project/``, with the task's
variables (script_env.py). Since it knows nothing of dtgui:

* its output is kept as it passes to the task's log, so a script that exits non-zero gets a
  ``failed`` event with its own last error line (the exception line of its traceback);
* the TensorBoard event files it writes become ``scalar`` events (tb_follow.py);
* ``started`` and ``finished`` are written here.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any

from .events import EventWriter
from .plan import Plan
from .script_env import expand_references, is_loss_tag, task_paths
from .supervisor import Child
from .tb_follow import TensorBoardFollower
from .tfrecord import Scalar


def last_error_line(text: str) -> str:
    """The line a person acts on: the exception line of the last traceback, else the last
    non-empty line."""
    lines = [ln.rstrip() for ln in text.replace("\r", "\n").splitlines()]
    start = max((i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call")),
                default=-1)
    candidates = lines[start + 1:] if start >= 0 else lines
    for line in reversed(candidates):
        if line.strip() and (start < 0 or not line.startswith((" ", "\t"))):
            return line.strip()[:500]
    return ""


class ScriptChild(Child):
    title = "The script"
    capture_output = True

    def __init__(self, plan: Plan, plan_path: str, task: str, out_dir: str,
                 events: EventWriter) -> None:
        self.plan = plan
        self.model: dict[str, Any] = plan.model
        self.events = events
        self.out_dir = out_dir
        bundle_dir = os.path.dirname(plan_path)
        self.paths = task_paths(bundle_dir, out_dir, task)
        self.values = {k: v for k, v in os.environ.items() if k.startswith("DTGUI_")}
        self.values.update(self.paths)
        self.cwd = os.path.join(bundle_dir, str(self.model.get("project", "project")))
        self.started_at = time.time()
        self.last_loss: float | None = None
        self.last_step = 0
        self.follower = TensorBoardFollower(
            [self.paths["DTGUI_TENSORBOARD_DIR"], self.paths["DTGUI_OUTPUT_DIR"]],
            self._on_scalar,
            shared=[self.cwd, out_dir],  # where the script may write on its own (e.g. ./logs)
            skip=[os.path.join(out_dir, d) for d in ("tensorboard", "script", "checkpoints",
                                                     "logs", "pids")])

    def command(self) -> list[str]:
        return [sys.executable, str(self.model.get("entry", "")),
                *(expand_references(str(a), self.values) for a in self.model.get("args") or ())]

    def environment(self, env: dict[str, str]) -> None:
        for key in ("DTGUI_OUTPUT_DIR", "DTGUI_TENSORBOARD_DIR", "DTGUI_CHECKPOINT_DIR"):
            os.makedirs(self.paths[key], exist_ok=True)
        own = self.model.get("env") or {}
        for key, value in list(env.items()):
            if key in own and "$" in value:
                env[key] = expand_references(value, self.values)
        env.update(self.paths)

    def _on_scalar(self, tag: str, scalar: Scalar) -> None:
        self.events.emit("scalar", tag=tag, step=scalar.step, value=scalar.value,
                         wall_time=scalar.wall_time)
        self.last_step = max(self.last_step, scalar.step)
        if is_loss_tag(tag):
            self.last_loss = scalar.value

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

    def stopped(self) -> None:
        self.follower.stop(drain=False)

    def exited(self) -> None:
        self.follower.stop(drain=True)  # scalars first: a task seen ended has all its events
        for problem in self.follower.problems[:3]:
            self.events.log(problem, level="warning")

    def outcome(self, code: int, output: str) -> int | None:
        if code != 0:
            return None
        self.events.emit("finished", steps=self.last_step, loss=self.last_loss,
                         seconds=round(time.time() - self.started_at, 3),
                         scalars=self.follower.count)
        return 0

    def failure(self, code: int, output: str) -> tuple[str, int]:
        line = last_error_line(output)
        error = f"{line} (the script exited with code {code})" if line \
            else f"The script exited with code {code}"
        return error, code if 0 < code < 128 else 1
