"""The supervisor: the task's first process. It never imports TensorFlow.

It runs the training in a child process and stays responsive whatever TensorFlow does:
TensorFlow can hold the GIL for minutes inside C++ (MultiWorkerMirroredStrategy() waiting for
its peers, a stuck collective), so a Python signal handler in the training process may never
run. Here:

* SIGTERM / SIGINT (to the task's process group, or to this process) -> the child is stopped
  (SIGTERM, then SIGKILL after 1 s), a ``log`` event "stopped" is written, exit 143 / 130.
* telemetry (``device`` events) runs here, so it keeps flowing while the child is busy.
* a child that dies without reporting (segfault, OOM killer) gets a ``failed`` event.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from typing import Any

from .events import EventWriter
from .telemetry import Telemetry

STOP_CODES = {signal.SIGTERM: 143, signal.SIGINT: 130}
CHILD_ENV = "DTGUI_WORKER_SUPERVISOR"
# TensorFlow's preemption notifier (MultiWorkerMirrored) installs its own SIGTERM handler
# in the training process, which then ignores SIGTERM: SIGKILL it after this grace.
STOP_GRACE_SECONDS = 1.0


class StopRequested(Exception):
    def __init__(self, sig: int) -> None:
        super().__init__(sig)
        self.sig = sig


def _raise_stop(sig: int, _frame: Any) -> None:
    raise StopRequested(sig)


def package_root() -> str:
    """The directory to put on sys.path so that this package imports under its own name."""
    root = os.path.dirname(os.path.abspath(__file__))
    for _ in (__package__ or "x").split("."):
        root = os.path.dirname(root)
    return root


def child_command(plan: str, task: str, out: str) -> list[str]:
    return [sys.executable, "-m", f"{__package__}.train", "--plan", plan, "--task", task,
            "--out", out, "--child"]


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _end_child(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()


def supervise(plan_path: str, task: str, out_dir: str, events: EventWriter) -> int:
    """Run the training child to its end; returns this task's exit code."""
    for sig in STOP_CODES:
        signal.signal(sig, _raise_stop)
    env = dict(os.environ)
    env[CHILD_ENV] = str(os.getpid())
    # GPU indices in CUDA_VISIBLE_DEVICES are NVML's (PCI bus order); make CUDA agree.
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    root = package_root()
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    telemetry: Telemetry | None = None
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc = subprocess.Popen(child_command(plan_path, task, out_dir), env=env)
        telemetry = Telemetry(events).start()
        code = proc.wait()
    except StopRequested as stop:
        # The event first: run.sh / the launcher SIGKILL the group soon after their SIGTERM.
        code = _stopped(events, stop.sig)
        if proc is not None:
            _end_child(proc)
        return code
    finally:
        for sig in STOP_CODES:
            signal.signal(sig, signal.SIG_IGN)  # a second signal must not cut the clean-up
        if telemetry is not None:
            telemetry.stop()
    if code in (0, 1):  # the child wrote its own finished / failed event
        return code
    if -code in STOP_CODES:  # the group's SIGTERM/SIGINT reached the child first
        return _stopped(events, -code)
    if code < 0:
        hint = " (out of memory? the kernel's OOM killer sends SIGKILL)" \
            if -code == signal.SIGKILL else ""
        error = f"The training process was killed by {_signal_name(-code)}{hint}"
    else:
        error = f"The training process exited with code {code} without reporting an error"
    events.emit("failed", error=error, traceback="")
    print(f"[{task}] FAILED: {error}", flush=True)
    return 1


def _stopped(events: EventWriter, sig: int) -> int:
    events.log(f"stopped ({_signal_name(sig)})", level="warning")
    print(f"[{events.task}] stopped by {_signal_name(sig)}", flush=True)
    return STOP_CODES.get(signal.Signals(sig), 143)


def child_setup() -> None:
    """In the training child: default signal actions, and die with the supervisor."""
    for sig in STOP_CODES:
        signal.signal(sig, signal.SIG_DFL)
    parent = os.environ.get(CHILD_ENV, "")
    if not parent.isdigit() or not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != int(parent):  # the supervisor died before prctl: give up now
        os._exit(1)
