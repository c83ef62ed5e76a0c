"""The machine probe, run here as it runs on every machine: its source on an interpreter's stdin.

The pre-launch check, the doctor's port check and reachability test, and TensorFlow's view
all run this one program; over SSH only the runner differs (tests/test_machine_python.py,
tests/test_doctor.py run it on sshd hosts).
"""

from __future__ import annotations

import importlib.metadata
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from dtgui.core.plans.placement import local_port_conflicts, place_local
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.launch.checks.precheck import check_python
from dtgui.remote.commands import LocalRunner
from dtgui.remote.probe import ask, probe, probe_source, read_tensorflow, tensorflow_view
from dtgui.worker import machine_probe

PYTHON = sys.executable
TF = importlib.metadata.version("tensorflow")


@contextmanager
def held_port() -> Iterator[int]:
    """A port another program listens on (127.0.0.1 only: TensorFlow could still not bind it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_one_port_check_here_and_in_the_program() -> None:
    with held_port() as port:
        assert machine_probe.port_is_free(port) is False
        plan = place_local(Plan(strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2),
                           ports=[port, port])
        assert f"Port {port}" in local_port_conflicts(plan)[0]
        answer = ask(LocalRunner(), PYTHON, ["facts", "--test-port", str(port), "--free-ports", "3"])
        assert answer.data is not None
        checked = answer.data["ports"]
        assert list(checked["busy"]) == [str(port)] and checked["errors"] == {}
        free = checked["free"]
        assert len(set(free)) == 3 and port not in free
    assert machine_probe.port_is_free(port)
    chosen = machine_probe.choose_free_ports(2)
    assert len(set(chosen)) == 2 and all(machine_probe.port_is_free(p) for p in chosen)


def test_the_pre_launch_check_passes_and_refuses_by_name(tmp_path: Path) -> None:
    with held_port() as port:
        check = check_python("box", PYTHON, LocalRunner(), TF, import_tf=False,
                             directory=str(tmp_path / "run"), port_count=2, ports=(port,),
                             modules=("numpy", "surely_not_a_module"), data_dir=str(tmp_path))
    assert check.problems == []
    assert check.tf_version == TF and check.executable == PYTHON
    assert check.ports_in_use == [port] and len(check.free_ports) == 2
    assert check.missing_modules == ["surely_not_a_module"] and check.data_dir_found is True
    assert (tmp_path / "run").is_dir() and check.directory == str(tmp_path / "run")

    other = check_python("box", PYTHON, LocalRunner(), "2.0.0", import_tf=False)
    assert other.problems == [f"box has TensorFlow {TF}, this machine 2.0.0: every machine needs "
                              f"the same version ({PYTHON} -m pip install tensorflow==2.0.0 "
                              "there)."]


def test_missing_tools_packages_and_interpreters_are_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = check_python("box", str(tmp_path / "nope"), LocalRunner(), TF)
    assert len(missing.problems) == 1 and "cannot be run there" in missing.problems[0]

    old = tmp_path / "python3.6"
    old.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo 'Python 3.6.9'; exit 0; }\n"
                   "echo 'SyntaxError: future feature annotations is not defined' >&2; exit 1\n")
    old.chmod(0o755)
    (too_old,) = check_python("box", str(old), LocalRunner(), TF).problems
    assert too_old == f"box: {old} is Python 3.6.9; dtgui's worker needs Python 3.10 or newer."

    subprocess.run([PYTHON, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True,
                   timeout=120)
    bare = str(tmp_path / "venv" / "bin" / "python")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no setsid, nohup, awk, tail, tar
    problems = check_python("box", bare, LocalRunner(), TF).problems
    assert problems[0].startswith(f"box: TensorFlow is not installed for {bare}")
    assert problems[1:] == [
        f"box: {bare} lacks the package numpy ({bare} -m pip install numpy).",
        f"box: {bare} lacks the package psutil ({bare} -m pip install psutil).",
        "box: setsid, nohup, awk, tail, tar not found (Debian/Ubuntu: coreutils, util-linux, "
        "mawk, tar)."]


@pytest.mark.slow
def test_what_tensorflow_sees_and_a_hanging_import_answers_in_time() -> None:
    view = tensorflow_view(LocalRunner(), PYTHON)
    assert view.version == TF and view.error == "" and view.gpus == ()  # no GPU here
    answer = ask(LocalRunner(), PYTHON, ["facts", "--tensorflow", "devices"])
    assert answer.data is not None, answer.detail
    tf = answer.data["tensorflow"]
    assert tf["keras"].startswith("3.") and isinstance(tf["built_with_cuda"], bool)
    assert any(d["device_type"] == "CPU" for d in tf["physical_devices"])

    stuck = ask(LocalRunner(), PYTHON, ["facts", "--tensorflow", "import", "--time-limit", "0.01"])
    assert stuck.data == {"timed_out": True, "error": "no answer within 0.01 s"}
    assert read_tensorflow(stuck, PYTHON, 0.01).error == \
        "importing TensorFlow took longer than 0.01 s"


@pytest.mark.slow
def test_the_probe_of_this_machine(tmp_path: Path) -> None:
    facts = probe(LocalRunner(), PYTHON)
    assert facts.python_path == PYTHON and facts.tf_version == TF and facts.warnings == []
    assert facts.cpu_cores > 0 and facts.ram_total > 0 and facts.hostname == socket.gethostname()
    lost = probe(LocalRunner(), str(tmp_path / "nope"))
    assert lost.warnings == [f"The Python interpreter {str(tmp_path / 'nope')!r} was not found "
                             "there."]
    assert lost.cpu_cores == facts.cpu_cores  # the machine's python3 told the rest


def test_this_machines_tensorflow_view_is_remembered_for_its_installation(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The Home panel's view of TensorFlow is asked once (a TensorFlow import in a subprocess,
    stood in for here: its real answer is the test above), then read back at the next start
    while the packages, GPUs and variables it depends on are the same; asked again when one
    changes, or on Refresh; a view with an error is not remembered."""
    from dtgui.core.machines.hardware import GpuInfo, TfView
    from dtgui.launch.checks import tf_view_memory

    answers = [TfView(version=TF, built_with_cuda=True, cuda_version="12.5.1")]
    asked: list[TfView] = []

    def ask_tensorflow() -> TfView:
        asked.append(answers[0])
        return answers[0]

    monkeypatch.setattr(tf_view_memory, "probe_tensorflow", ask_tensorflow)
    # a data dir of its own: the stand-in's views stay out of what the session carries
    monkeypatch.setenv("DTGUI_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    first = answers[0]
    assert tf_view_memory.local_tf_view(()) == first and len(asked) == 1
    assert tf_view_memory.local_tf_view(()) == first and len(asked) == 1  # the next start
    gpu = GpuInfo(0, "NVIDIA H100", 80 << 30, 0, 0.0, driver="550.54", compute_capability="9.0")
    assert tf_view_memory.local_tf_view((gpu,)) == first and len(asked) == 2  # a GPU came
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert tf_view_memory.local_tf_view((gpu,)) == first and len(asked) == 3
    assert tf_view_memory.local_tf_view((gpu,), fresh=True) == first and len(asked) == 4
    answers[0] = TfView(error="importing TensorFlow failed: ImportError")
    assert tf_view_memory.local_tf_view((gpu,), fresh=True).error and len(asked) == 5
    assert tf_view_memory.local_tf_view((gpu,)) == first and len(asked) == 5  # kept
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert tf_view_memory.local_tf_view((gpu,)).error and len(asked) == 6
    assert tf_view_memory.local_tf_view((gpu,)).error and len(asked) == 7  # not remembered


def test_reachability_listener_and_connection() -> None:
    port = machine_probe.choose_free_ports(1)[0]
    listener = subprocess.Popen([PYTHON, "-", "listen", "", str(port), "t0ken", "2", "20"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdin is not None and listener.stdout is not None
        listener.stdin.write(probe_source().decode())
        listener.stdin.close()
        assert listener.stdout.readline().split()[0] == "LISTENING"

        def connect(token: str) -> dict[str, object]:
            answer = ask(LocalRunner(), PYTHON, ["connect", "127.0.0.1", str(port), token, "2"])
            assert answer.data is not None
            return answer.data

        assert connect("t0ken")["outcome"] == "ok"
        other = connect("another")
        assert other["outcome"] == "other" and other["detail"] == "it sent b't0ken\\n'"
        said = listener.stdout.read().split()  # dual-stack: 127.0.0.1 or ::ffff:127.0.0.1
        assert said[::2] == ["ACCEPTED", "ACCEPTED", "DONE"] and said[-1] == "2"
        assert said[1].endswith("127.0.0.1")
    finally:
        listener.kill()
        listener.wait()
    assert connect("t0ken")["outcome"] == "refused"
