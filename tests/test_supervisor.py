"""The task supervisor with small stand-in children (no TensorFlow): how each kind's end
becomes the task's events and exit code, stop by signal, and the child dying with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from conftest import ROOT
from fakes import pynvml_slow_to_start

from dtgui.worker.script_child import last_error_line

# Runs `supervise` in its own process (it installs signal handlers) with a child that runs
# CHILD_CODE; argv: events file, child code, kind ("training" or "script").
SUPERVISED = textwrap.dedent("""
    import sys
    from dtgui.worker.events import EventWriter
    from dtgui.worker.supervisor import Child, TrainingChild, supervise

    events_path, code, kind = sys.argv[1:4]
    base = TrainingChild if kind == "training" else Child

    class Stand(base):
        capture_output = kind == "script"
        def __init__(self):
            pass
        def command(self):
            return [sys.executable, "-c", code]

    events = EventWriter(events_path, "worker:0")
    sys.exit(supervise(Stand(), events))
""")


def supervised(tmp_path: Path, code: str, kind: str = "training",
               timeout: float = 60) -> tuple[int, list[dict[str, Any]], str]:
    events = tmp_path / "events.jsonl"
    proc = subprocess.run([sys.executable, "-c", SUPERVISED, str(events), code, kind],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    lines = events.read_text().splitlines() if events.exists() else []
    return proc.returncode, [json.loads(x) for x in lines], proc.stdout + proc.stderr


def failures(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("kind") == "failed"]


def test_a_child_killed_by_sigkill_is_told_as_perhaps_out_of_memory(tmp_path: Path) -> None:
    code, events, out = supervised(tmp_path, "import os; os.kill(os.getpid(), 9)")
    assert code == 1, out
    (failed,) = failures(events)
    assert failed["error"] == ("The training process was killed by SIGKILL (out of memory? "
                               "the kernel's OOM killer sends SIGKILL)")


def test_the_training_child_reports_its_own_end_else_the_supervisor_does(
        tmp_path: Path) -> None:
    for exit_code in (0, 1):  # the child wrote finished / failed itself
        code, events, _ = supervised(tmp_path, f"raise SystemExit({exit_code})")
        assert code == exit_code and failures(events) == []
    code, events, _ = supervised(tmp_path, "raise SystemExit(3)")
    assert code == 1
    assert failures(events)[-1]["error"] == ("The training process exited with code 3 "
                                             "without reporting an error")


def test_a_captured_child_fails_with_its_last_error_line_and_output(tmp_path: Path) -> None:
    code, events, out = supervised(tmp_path, "print('working'); raise KeyError('x')", "script")
    assert code == 1
    (failed,) = failures(events)
    assert failed["error"] == "The child process exited with code 1"  # the base kind's words
    assert "KeyError" in failed["traceback"] and "working" in out  # relayed to the log


def test_sigterm_stops_the_child_and_says_so(tmp_path: Path) -> None:
    events_path = tmp_path / "events.jsonl"
    pid_file = tmp_path / "child.pid"
    child = (f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
             "time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISED, str(events_path), child,
                             "training"], cwd=ROOT)
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child_pid = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    events = [json.loads(x) for x in events_path.read_text().splitlines()]
    assert [e["message"] for e in events if e["kind"] == "log"] == ["stopped (SIGTERM)"]
    assert not _alive(child_pid)


def test_a_stop_while_the_device_telemetry_starts_is_not_lost(tmp_path: Path) -> None:
    """SIGTERM arriving while NVML starts (its import and init guard every error, as a machine
    without a driver needs): the stop still ends the task. A stand-in pynvml (a fake: no GPU
    here) says when its init has begun and holds it there."""
    started = tmp_path / "nvml-init"
    fake = pynvml_slow_to_start(tmp_path / "fake_pynvml", started)
    events_path = tmp_path / "events.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISED, str(events_path),
                             "import time; time.sleep(600)", "training"], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(fake)})
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 143
    events = [json.loads(x) for x in events_path.read_text().splitlines()]
    assert [e["message"] for e in events if e["kind"] == "log"] == ["stopped (SIGTERM)"]


def test_the_child_dies_with_a_killed_supervisor(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    child = (f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
             "time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISED, str(tmp_path / "e.jsonl"),
                             child, "script"], cwd=ROOT)
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child_pid = int(pid_file.read_text())
    proc.kill()  # no clean-up runs: PR_SET_PDEATHSIG ends the child
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while _alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child_pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (not yet reaped by init) is gone for this purpose
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_last_error_line_is_the_exception_of_the_last_traceback() -> None:
    text = ("noise\nTraceback (most recent call last):\n  File \"t.py\", line 1\n"
            "    boom()\nValueError: bad units\n")
    assert last_error_line(text) == "ValueError: bad units"
    assert last_error_line("a\n\nlast words\n\n") == "last words"
    # a message of several lines is kept whole, TensorFlow's own log lines left out
    per_replica = (
        "Traceback (most recent call last):\n  File \"main.py\", line 9, in <module>\n"
        "    model.fit(x)\nTypeError: Failed to convert elements of PerReplica:{\n"
        "  0: <tf.Tensor: shape=(), dtype=float32, numpy=1.0>,\n"
        "2026-11-24 17:11:31.123: W tensorflow/core/kernels/data/iterator.cc:1] cancelled\n"
        "  1: <tf.Tensor: shape=(), dtype=float32, numpy=2.0>\n"
        "}) with an unsupported type (<class 'PerReplica'>) to a Tensor.\n")
    assert last_error_line(per_replica) == (
        "TypeError: Failed to convert elements of PerReplica:{ 0: <tf.Tensor: shape=(), "
        "dtype=float32, numpy=1.0>, 1: <tf.Tensor: shape=(), dtype=float32, numpy=2.0> }) "
        "with an unsupported type (<class 'PerReplica'>) to a Tensor.")
    shortened = last_error_line(per_replica, limit=140)
    assert shortened.startswith("TypeError: Failed to convert elements of PerReplica:{ ... ")
    assert shortened.endswith("}) with an unsupported type (<class 'PerReplica'>) to a Tensor.")


def test_a_training_child_is_asked_to_stop_and_reports_it_or_ends_on_a_second_stop(
        tmp_path: Path) -> None:
    """Once it trains (its `started` event), a stop is relayed to the training child (SIGUSR1,
    which no TensorFlow code takes) and it has its grace to save and say so; a child that
    does not end is killed at a second stop signal, well within that grace."""
    pid_file = tmp_path / "child.pid"
    prelude = ("import os, sys, time\n"
               "from dtgui.worker.events import EventWriter\n"
               "from dtgui.worker.stop_request import STOPPED_EXIT, StopRequest\n"
               f"events = EventWriter({str(tmp_path / 'events.jsonl')!r}, 'worker:0')\n")
    saving = prelude + textwrap.dedent(f"""
        stop = StopRequest().install()
        events.emit("started")
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        while not stop.requested:
            time.sleep(0.02)
        events.emit("log", level="warning", message="saved", stopped_at=7, saved=True)
        sys.exit(STOPPED_EXIT)
        """)
    deaf = prelude + textwrap.dedent(f"""
        events.emit("started")
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        time.sleep(600)
        """)
    for child, signals_sent in ((saving, 1), (deaf, 2)):
        (tmp_path / "events.jsonl").unlink(missing_ok=True)
        pid_file.unlink(missing_ok=True)
        proc = subprocess.Popen([sys.executable, "-c", SUPERVISED, str(tmp_path / "events.jsonl"),
                                 child, "training"], cwd=ROOT)
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        for _ in range(signals_sent):
            proc.send_signal(signal.SIGTERM)  # the supervisor only: it relays the stop
            time.sleep(0.5)
        assert proc.wait(timeout=15) == 143  # the grace is 20 s
        events = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
        told = [e["message"] for e in events if e["kind"] == "log"]
        assert told == (["saved"] if child is saving else ["stopped (SIGTERM)"])
        assert not _alive(int(pid_file.read_text()))
