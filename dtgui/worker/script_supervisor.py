"""The supervisor of a task that runs a user's own training script. No TensorFlow here.

Like `supervisor.supervise` for the built-in loop: the script runs as a child process
(``python ENTRY ARGS`` in the bundle's ``project/``), SIGTERM/SIGINT stop it, ``device``
telemetry flows from here. In addition, since the script knows nothing of dtgui:

* its output goes through a pipe to this process's stdout (the task's log), and the last
  lines are kept, so a script that exits non-zero gets a ``failed`` event with its own last
  error line (the exception line of its traceback);
* the TensorBoard event files it writes become ``scalar`` events (tb_follow.py);
* ``started`` and ``finished`` are written here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from .events import EventWriter
from .script_env import expand_references, is_loss_tag, task_paths
from .supervisor import (
    CHILD_ENV,
    STOP_CODES,
    StopRequested,
    _end_child,
    _raise_stop,
    _signal_name,
    _stopped,
    package_root,
)
from .tb_follow import TensorBoardFollower
from .telemetry import Telemetry

TAIL_BYTES = 64 * 1024


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


class _Relay(threading.Thread):
    """Copies the child's output to our stdout as it comes, keeping the last bytes."""

    def __init__(self, fd: int) -> None:
        super().__init__(name="script-output", daemon=True)
        self.fd = fd
        self.tail = bytearray()

    def run(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:
                break
            if not data:
                break
            with contextlib.suppress(OSError):
                view = memoryview(data)
                while view:
                    view = view[os.write(1, view):]
            self.tail += data
            if len(self.tail) > 2 * TAIL_BYTES:
                del self.tail[:-TAIL_BYTES]
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def text(self) -> str:
        return bytes(self.tail[-TAIL_BYTES:]).decode("utf-8", "replace")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def supervise_script(plan: dict[str, Any], plan_path: str, task: str, out_dir: str,
                     events: EventWriter) -> int:
    model = plan.get("model") or {}
    bundle_dir = os.path.dirname(plan_path)
    paths = task_paths(bundle_dir, out_dir, task)
    for key in ("DTGUI_OUTPUT_DIR", "DTGUI_TENSORBOARD_DIR", "DTGUI_CHECKPOINT_DIR"):
        os.makedirs(paths[key], exist_ok=True)
    env = dict(os.environ)
    values = {k: v for k, v in env.items() if k.startswith("DTGUI_")}
    values.update(paths)
    for key, value in list(env.items()):
        if key in (model.get("env") or {}) and "$" in value:
            env[key] = expand_references(value, values)
    env.update(paths)
    env[CHILD_ENV] = str(os.getpid())
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    root = package_root()  # dtgui_worker importable: report() and ReportCallback
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    project = os.path.join(bundle_dir, str(model.get("project", "project")))
    command = [sys.executable, str(model.get("entry", "")),
               *(expand_references(str(a), values) for a in model.get("args") or ())]

    last_loss: list[float] = []
    last_step = [0]

    def on_scalar(tag: str, scalar: Any) -> None:
        events.emit("scalar", tag=tag, step=scalar.step, value=scalar.value,
                    wall_time=scalar.wall_time)
        last_step[0] = max(last_step[0], scalar.step)
        if is_loss_tag(tag):
            last_loss[:] = [scalar.value]

    for sig in STOP_CODES:
        signal.signal(sig, _raise_stop)
    started = time.time()
    follower = TensorBoardFollower(
        [paths["DTGUI_TENSORBOARD_DIR"], paths["DTGUI_OUTPUT_DIR"]], on_scalar,
        shared=[project, out_dir],  # where the script may write on its own (e.g. ./logs)
        skip=[os.path.join(out_dir, d) for d in ("tensorboard", "script", "checkpoints",
                                                 "logs", "pids")])
    telemetry: Telemetry | None = None
    proc: subprocess.Popen[bytes] | None = None
    relay: _Relay | None = None
    try:
        read_fd, write_fd = os.pipe()
        try:
            proc = subprocess.Popen(command, cwd=project, env=env, stdin=subprocess.DEVNULL,
                                    stdout=write_fd, stderr=write_fd,
                                    preexec_fn=_die_with_parent)
        finally:
            os.close(write_fd)
        relay = _Relay(read_fd)
        relay.start()
        follower.pid = proc.pid
        replicas = int(env.get("DTGUI_REPLICAS_PER_TASK", "0") or 0)
        events.emit("started", replicas=replicas, replica_ids=[], devices=[],
                    strategy=plan.get("strategy", ""), steps=int(plan.get("steps", 0) or 0),
                    global_batch=int(env.get("DTGUI_GLOBAL_BATCH", "0") or 0),
                    versions={"python": sys.version.split()[0]}, pid=proc.pid,
                    supervisor_pid=os.getpid(), host=socket.gethostname(),
                    script=" ".join(command[1:]))
        telemetry = Telemetry(events).start()
        follower.start()
        code = proc.wait()
    except StopRequested as stop:
        code = _stopped(events, stop.sig)
        if proc is not None:
            _end_child(proc)
        follower.stop(drain=False)
        return code
    except OSError as exc:
        events.emit("failed", error=f"could not start {command[1]} in {project}: {exc}",
                    traceback="")
        return 1
    finally:
        for sig in STOP_CODES:
            signal.signal(sig, signal.SIG_IGN)
        if telemetry is not None:
            telemetry.stop()
    if relay is not None:
        relay.join(5)
    follower.stop(drain=True)  # scalars first: a task seen ended has all its events
    for problem in follower.problems[:3]:
        events.log(problem, level="warning")
    if code == 0:
        events.emit("finished", steps=last_step[0], loss=last_loss[0] if last_loss else None,
                    seconds=round(time.time() - started, 3), scalars=follower.count)
        return 0
    if code < 0 and -code in STOP_CODES:
        return _stopped(events, -code)
    line = last_error_line(relay.text() if relay is not None else "")
    if code < 0:
        hint = " (out of memory? the kernel's OOM killer sends SIGKILL)" \
            if -code == signal.SIGKILL else ""
        error = f"The script was killed by {_signal_name(-code)}{hint}"
    else:
        error = line or f"The script exited with code {code}"
        if line:
            error = f"{line} (the script exited with code {code})"
    events.emit("failed", error=error, traceback=relay.text()[-4000:] if relay else "")
    print(f"[{task}] FAILED: {error}", flush=True)
    return code if 0 < code < 128 else 1
