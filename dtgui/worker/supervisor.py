"""The supervisor: a task's first process. It never imports TensorFlow.

It runs the task's work in a child process and stays responsive whatever that child does:
TensorFlow can hold the GIL for minutes inside C++ (MultiWorkerMirroredStrategy() waiting for
its peers, a stuck collective), so a Python signal handler in the training process may never
run. The child is one of two kinds (`Child`): dtgui's own training loop (`TrainingChild`,
``python -m dtgui_worker.train --child``) or a user's own script (`script_child.ScriptChild`).
For both:

* SIGTERM / SIGINT / SIGUSR1 (to the task's process group, or to this process) -> the child is
  asked to stop (`Child.stop_signal`) and given `Child.grace` seconds to save and end, then
  SIGKILLed (at once on a second stop signal: a parameter server's task serves on until then,
  as the coordinator's checkpoint reads its variables); a ``log`` event "stopped" is written (by dtgui's training loop itself, with the
  step it saved), exit 143 / 130 / 138. SIGUSR1 is what a Slurm job gets ahead of its time
  limit (job.sbatch). A child that goes on training meanwhile gets its kind's
  `Child.went_on_signal` (a user's script, whose SIGTERM TensorFlow may take: SIGINT).
* telemetry (``device`` events) runs here, so it keeps flowing while the child is busy.
* a child killed by a signal (segfault, the OOM killer) gets a ``failed`` event.
* the child dies with this process (PR_SET_PDEATHSIG on Linux).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .events import EventWriter
from .profile_request import PROFILE_SIGNAL
from .stop_request import RELAY_SIGNAL, STOP_GRACE_SECONDS, STOPPED_EXIT
from .telemetry import Telemetry

STOP_CODES = {signal.SIGTERM: 143, signal.SIGINT: 130, signal.SIGUSR1: 138}
CHILD_ENV = "DTGUI_WORKER_SUPERVISOR"
UNSTARTED_GRACE_SECONDS = 1.0  # a training child that has not started training: nothing to save
WENT_ON_LOOK_SECONDS = 0.25  # how often a stopped child's grace looks whether it went on
TAIL_BYTES = 64 * 1024  # the end of a child's output kept for its `failed` event


class StopRequested(BaseException):
    """SIGTERM/SIGINT, raised in the main thread. A BaseException, as KeyboardInterrupt is: the
    `except Exception` guards around optional work (NVML's start, telemetry) must not swallow a
    stop that arrives while they run."""

    def __init__(self, sig: int) -> None:
        super().__init__(sig)
        self.sig = sig


_STOPS = {"seen": 0, "waiting": 0}  # stop signals seen; 1 while a stopped child has its grace


def _raise_stop(sig: int, _frame: Any) -> None:
    _STOPS["seen"] += 1
    if _STOPS["seen"] == 1 or _STOPS["waiting"]:  # a second stop ends the child's grace
        raise StopRequested(sig)


def package_root() -> str:
    """The directory to put on sys.path so that this package imports under its own name."""
    root = os.path.dirname(os.path.abspath(__file__))
    for _ in (__package__ or "x").split("."):
        root = os.path.dirname(root)
    return root


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


class Child:
    """What differs between the kinds of child; the supervision itself is `supervise`."""

    title = "The child process"  # how a `failed` event names it
    cwd: str | None = None
    stop_signal: int = signal.SIGTERM  # what asks the child to stop
    grace = STOP_GRACE_SECONDS  # how long it has to end once asked
    # sent once to a child that went on training after it was asked to stop (0: none)
    went_on_signal = 0
    capture_output = False  # through this process, keeping the tail for the `failed` event

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self, env: dict[str, str]) -> None:
        """Add this kind's variables to the child's environment (a copy of ours)."""

    def started(self, pid: int) -> None:
        """The child runs (its `started` event, followers of its files)."""

    def stopped(self) -> None:
        """The task is being stopped: end what `started` began, without waiting."""

    def exited(self) -> None:
        """The child ended by itself: collect what it left before the task's end is told."""

    def output(self, data: bytes) -> None:
        """A piece of the child's output as it passes (with `capture_output`; the relay's
        thread)."""

    def reported_stop(self, code: int) -> bool:
        """Whether a child that exited with `code` after a stop wrote the "stopped" event."""
        return False

    def asked_to_stop(self) -> None:
        """The stop signal was sent: what `went_on` compares with is taken here."""

    def went_on(self) -> bool:
        """Whether the child went on training after it was asked to stop (it ignored the
        stop signal); asked during its grace."""
        return False

    def stop_grace(self, events: EventWriter) -> float:
        """How long the child has to end once asked: `grace` once it trains."""
        return self.grace

    def outcome(self, code: int, output: str) -> int | None:
        """The task's exit code for a child that exited with `code` >= 0 (None: a failure
        with `failure`'s wording)."""
        return code if code == 0 else None

    def failure(self, code: int, output: str) -> tuple[str, int]:
        """The `failed` event's error, and the task's exit code, for exit `code` >= 0."""
        return f"{self.title} exited with code {code}", 1


class TrainingChild(Child):
    """dtgui's training loop (train.py ``--child``): it writes its own started, finished,
    failed and stopped events and exits 0, 1 or STOPPED_EXIT. Asked to stop, it saves a
    checkpoint at the step it reached (stop_request.py)."""

    title = "The training process"
    stop_signal = RELAY_SIGNAL

    def __init__(self, plan_path: str, task: str, out_dir: str) -> None:
        self.plan_path, self.task, self.out_dir = plan_path, task, out_dir

    def reported_stop(self, code: int) -> bool:
        return code == STOPPED_EXIT

    def stop_grace(self, events: EventWriter) -> float:
        # Before its `started` event it has trained nothing, and may be held inside
        # TensorFlow (MultiWorkerMirrored waiting for its peers) where no stop is seen.
        return self.grace if wrote_started(events.path) else UNSTARTED_GRACE_SECONDS

    def command(self) -> list[str]:
        return [sys.executable, "-m", f"{__package__}.train", "--plan", self.plan_path,
                "--task", self.task, "--out", self.out_dir, "--child"]

    def outcome(self, code: int, output: str) -> int | None:
        return code if code in (0, 1) else None  # 1: it wrote its own `failed` event

    def failure(self, code: int, output: str) -> tuple[str, int]:
        return f"{self.title} exited with code {code} without reporting an error", 1


def wrote_started(path: str) -> bool:
    """Whether the events file at `path` holds a `started` event."""
    try:
        with open(path, "rb") as f:
            return any(b'"kind":"started"' in line for line in f)
    except OSError:
        return False


def child_environment() -> dict[str, str]:
    """Our environment, plus what every child needs."""
    env = dict(os.environ)
    env[CHILD_ENV] = str(os.getpid())
    # GPU indices in CUDA_VISIBLE_DEVICES are NVML's (PCI bus order); make CUDA agree.
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    root = package_root()  # this package importable: train.py, and report() for a script
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _die_with_parent_hook() -> Callable[[], None] | None:
    """Runs in the child between fork and exec: SIGKILL it when this process dies (Linux);
    if this process died already, exit at once. Resolved here: nothing is imported after the
    fork."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        # Slurm's warning before a time limit goes to every process of the job: a child
        # that does not take it (a user's script) must not die of it
        signal.signal(RELAY_SIGNAL, signal.SIG_IGN)
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)

    return hook


class OutputRelay(threading.Thread):
    """Copies a child's output to our stdout (the task's log) as it comes, keeping its end."""

    def __init__(self, fd: int, read: Callable[[bytes], None] | None = None) -> None:
        super().__init__(name="child-output", daemon=True)
        self.fd = fd
        self.tail = bytearray()
        self.read = read  # also handed each piece (the script child reads printed metrics)

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
            if self.read is not None:
                try:
                    self.read(data)
                except Exception as exc:  # noqa: BLE001 - reading must never stop the relay
                    self.read = None
                    print(f"[dtgui] reading the output stopped: {exc}", flush=True)
            if len(self.tail) > 2 * TAIL_BYTES:
                del self.tail[:-TAIL_BYTES]
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def text(self) -> str:
        return bytes(self.tail[-TAIL_BYTES:]).decode("utf-8", "replace")


def _start_child(child: Child, command: list[str], env: dict[str, str]) -> tuple[
        subprocess.Popen[bytes], OutputRelay | None]:
    hook = _die_with_parent_hook()
    if not child.capture_output:
        return subprocess.Popen(command, cwd=child.cwd, env=env, preexec_fn=hook), None
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(command, cwd=child.cwd, env=env,
                                stdin=subprocess.DEVNULL, stdout=write_fd, stderr=write_fd,
                                preexec_fn=hook)
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    relay = OutputRelay(read_fd, child.output)
    relay.start()
    return proc, relay


def _end_child(proc: subprocess.Popen[bytes], child: Child, events: EventWriter) -> int:
    """Ask the child to stop, give it its grace, then kill it; returns its exit code."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(child.stop_signal)
    child.asked_to_stop()
    try:
        _STOPS["waiting"] = 1
        if _STOPS["seen"] > 1:  # asked again before its grace began
            raise StopRequested(signal.SIGTERM)
        return _wait_in_grace(proc, child, events, time.monotonic() + child.stop_grace(events))
    except (subprocess.TimeoutExpired, StopRequested):  # its grace is over, or asked again
        for sig in STOP_CODES:
            signal.signal(sig, signal.SIG_IGN)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        return proc.wait()
    finally:
        _STOPS["waiting"] = 0


def _wait_in_grace(proc: subprocess.Popen[bytes], child: Child, events: EventWriter,
                   deadline: float) -> int:
    """The child's exit code once it ended before `deadline` (else TimeoutExpired); a child
    that goes on training meanwhile gets its `went_on_signal`, once."""
    watching = bool(child.went_on_signal)
    while True:
        left = deadline - time.monotonic()
        try:
            return proc.wait(timeout=min(left, WENT_ON_LOOK_SECONDS) if watching else left)
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise
        if watching and child.went_on():
            watching = False
            name = signal_name(child.went_on_signal)
            events.log(f"{child.title} went on training after it was asked to stop: {name} "
                       "sent", level="warning")
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(child.went_on_signal)


def supervise(child: Child, events: EventWriter) -> int:
    """Run `child` to its end; returns this task's exit code."""
    for sig in STOP_CODES:
        signal.signal(sig, _raise_stop)
    # a profile asked is the training process's (which takes it); ignored here and, inherited,
    # in a child that takes no such signal (a user's script), also when no wrapper runs this
    signal.signal(PROFILE_SIGNAL, signal.SIG_IGN)
    env = child_environment()
    child.environment(env)
    command = child.command()
    telemetry: Telemetry | None = None
    proc: subprocess.Popen[bytes] | None = None
    relay: OutputRelay | None = None
    try:
        proc, relay = _start_child(child, command, env)
        child.started(proc.pid)
        telemetry = Telemetry(events, alive=lambda: proc.poll() is None).start()
        code = proc.wait()
    except StopRequested as stop:
        ended = _end_child(proc, child, events) if proc is not None else -signal.SIGKILL
        child.stopped()
        if not child.reported_stop(ended):
            _stopped(events, stop.sig)
        return STOP_CODES.get(signal.Signals(stop.sig), 143)
    except OSError as exc:
        where = f" in {child.cwd}" if child.cwd else ""
        events.emit("failed", error=f"could not start {' '.join(command[1:])}{where}: {exc}",
                    traceback="")
        return 1
    finally:
        for sig in STOP_CODES:
            signal.signal(sig, signal.SIG_IGN)  # a second signal must not cut the clean-up
        if telemetry is not None:
            telemetry.stop()
    if relay is not None:
        relay.join(5)
    child.exited()
    output = relay.text() if relay is not None else ""
    if code < 0 and -code in STOP_CODES:  # the group's stop signal reached the child first
        return _stopped(events, -code)
    if child.reported_stop(code):  # the child was stopped by the group's signal and said so
        return code
    if code < 0:
        hint = " (out of memory? the kernel's OOM killer sends SIGKILL)" \
            if -code == signal.SIGKILL else ""
        error, result = f"{child.title} was killed by {signal_name(-code)}{hint}", 1
    else:
        exit_code = child.outcome(code, output)
        if exit_code is not None:
            return exit_code
        error, result = child.failure(code, output)
    events.emit("failed", error=error, traceback=output[-4000:])
    print(f"[{events.task}] FAILED: {error}", flush=True)
    return result


def _stopped(events: EventWriter, sig: int) -> int:
    events.log(f"stopped ({signal_name(sig)})", level="warning")
    print(f"[{events.task}] stopped by {signal_name(sig)}", flush=True)
    return STOP_CODES.get(signal.Signals(sig), 143)
