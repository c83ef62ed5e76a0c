"""Every stand-in the tests use for a part of the product or of the machine, and one
`wait_for`: events built the way the training program writes them (parsed through the
product's own `parse_line`), a run moved by hand (`FakeRun`), a machine whose polls are
scripted (`ScriptedExecutor`), a login node whose Slurm answers from a table (`FakeSlurm`), an
SSH connection made earlier (`FakeSshClient`), an `nvidia-smi` answering as an H100 machine's
did, an interpreter that records what a task script hands it, interpreters whose NVML
replays a real GPU's telemetry (or is slow to start), and the desktop's opener of file URLs
(`opened_file_urls`).

Two stand-ins are files of their own, because something other than a test imports or runs
them: tests/fake_nvml/pynvml.py is imported as the `pynvml` module (its directory put first
on the path: `use_fake_nvml`, `python_with_fake_gpus`), and tests/stub_task.py is the training
program a stub interpreter runs instead of TensorFlow (`runs.stub_python`), copied where the
SSH test account can read it and run without dtgui on its path. The supervised child's
stand-in in tests/test_supervisor.py (`Stand`) is part of the code that child process runs."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shlex
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import paramiko
import pytest
from PySide6.QtCore import QObject, QUrl, Slot
from PySide6.QtGui import QDesktopServices

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.events import Event, parse_line
from dtgui.core.live_run import LiveRun
from dtgui.core.measure.profile_answers import ENDED, WRITTEN_MESSAGE, profiling_message
from dtgui.core.plans.plan import Plan, TaskSpec
from dtgui.core.runs.records import RunRecord
from dtgui.core.runs.run_state import RunState
from dtgui.launch.exec.executor import Executor, MachinePoll, TaskPoll
from dtgui.launch.runs.run_source import BundledRun
from dtgui.remote.connection import SSHClient
from dtgui.remote.transfer import CopyProgress
from dtgui.worker import step_batch
from dtgui.worker.events import SCHEMA_VERSION  # the version the worker writes

TESTS = Path(__file__).resolve().parent
FAKE_NVML = TESTS / "fake_nvml"  # the `pynvml` stand-in's directory
GPU_FIXTURES = TESTS / "fixtures" / "gpu"
H100_ROW = (GPU_FIXTURES / "nvidia-smi-query-h100.csv").read_text().strip()
H100_PROBE = (GPU_FIXTURES / "probe-h100.txt").read_text()
H100_COMPUTE_CAP = "9.0"  # what NVML reported for that GPU


def wait_for(condition: Callable[[], object], timeout: float, message: str = "",
             interval: float = 0.05) -> float:
    """Wait until `condition()` is true; return the seconds it took. Fails with `message`
    (and the time waited) when `timeout` seconds pass first."""
    start = time.monotonic()
    while not condition():
        waited = time.monotonic() - start
        assert waited < timeout, f"{message or 'timed out'} (waited {waited:.1f} s)"
        time.sleep(interval)
    return time.monotonic() - start


def event(kind: str, task: str = "worker:0", t: float = 1000.0, v: int = SCHEMA_VERSION,
          **fields: Any) -> Event:
    """One event as a reader parses it from a task's events file."""
    parsed = parse_line(json.dumps({"v": v, "kind": kind, "task": task, "t": t, **fields}))
    assert parsed is not None, kind
    return parsed


def step_losses(first: int, count: int, replicas: int = 2, seed: int = 0) -> np.ndarray:
    """Per-replica losses (rows: steps, columns: replicas) that fall like training's."""
    rng = np.random.default_rng(seed + first)
    steps = np.arange(first, first + count)[:, None]
    return (2.0 / np.sqrt(steps) + 0.1 * np.arange(replicas)
            + rng.normal(0, 0.05, (count, replicas))).astype(np.float32)


def steps_fields(first: int, losses: np.ndarray, replica_ids: list[int] | None = None,
                 epoch: int = 1, stride: int = 1, examples_per_sec: float = 500.0,
                 lr: float | None = None) -> dict[str, Any]:
    """The fields of a `steps` event (one training call) carrying `losses`."""
    means = losses.mean(axis=1)
    fields: dict[str, Any] = dict(
        first=first, count=len(losses), stride=stride, epoch=epoch,
        replica_ids=list(range(losses.shape[1])) if replica_ids is None else replica_ids,
        encoding=step_batch.ENCODING, losses=step_batch.encode(losses),
        means=step_batch.encode(means), loss=float(means[-1]),
        examples_per_sec=examples_per_sec)
    if lr is not None:
        fields["lr"] = lr
    return fields


def steps_event(first: int, count: int, replicas: int = 2, lr: float | None = None,
                task: str = "worker:0", epoch: int = 1) -> Event:
    """A `steps` event for steps first..first+count-1 with `step_losses`."""
    return event("steps", task, t=1000.0 + first + count,
                 **steps_fields(first, step_losses(first, count, replicas), epoch=epoch, lr=lr))


def started_event(replica_ids: list[int], steps: int = 100, task: str = "worker:0",
                  strategy: str = "mirrored", **fields: Any) -> Event:
    """The `started` event a task writes once its strategy is built."""
    return event("started", task, replicas=len(replica_ids), replica_ids=replica_ids,
                 steps=steps, strategy=strategy, **fields)


class FakeRun(BundledRun):
    """A whole run as the UI follows it (`dtgui.launch.runs.run_source.RunSource`), moved by hand:
    set `state`, `message`, `restarts`, `final_loss`, feed `metrics`, then `end(...)`."""

    def __init__(self, metrics: LiveRun | None = None, plan: Plan | None = None,
                 path: Path | str = "fake-run", max_restarts: int = 0,
                 record: RunRecord | None = None) -> None:
        plan = plan or Plan(run_name="fake-run")
        self.metrics = metrics or LiveRun(plan.steps)
        self.bundle = Bundle(Path(path), plan)
        self.state = RunState.RUNNING
        self.message = ""
        self.finished = False
        self.restarts = 0
        self.max_restarts = max_restarts
        self.final_loss: float | None = None
        self.record = record
        self.stop_calls = 0  # request_stop() calls
        self.profile_asks: list[int] = []  # the steps of each request_profile()
        self.detached = False
        self.closely = True  # follow_closely's last word

    def request_profile(self, steps: int, limit: float = 0.0,
                        said: Callable[[str], None] | None = None) -> str:
        """Says the steps it would capture from the next step on, and that it wrote them."""
        if self.finished:
            return f"no profile: {ENDED}"
        self.profile_asks.append(steps)
        if said is not None:
            said(profiling_message(self.metrics.snapshot().step + 1,
                                   self.metrics.snapshot().step + steps))
        return WRITTEN_MESSAGE

    def request_stop(self) -> None:
        self.stop_calls += 1
        if not self.finished:
            self.state = RunState.STOPPING

    def detach(self) -> None:
        self.detached = True

    def follow_closely(self, closely: bool) -> None:
        self.closely = closely

    def restart(self, message: str = "restarting every task from the last checkpoint") -> None:
        self.restarts += 1
        self.message = message

    def end(self, state: str = "finished", message: str = "",
            final_loss: float | None = None) -> None:
        """End the run as the controller does: its state and message first, then finished."""
        self.message = message or f"run {state}"
        if final_loss is not None:
            self.final_loss = final_loss
        self.state = RunState(state)
        self.finished = True


class ScriptedExecutor(Executor):
    """A machine whose polls are scripted: set `alive` (per task), `stopped` (tasks that
    wrote their `stopped` event), `silent` (tasks that write nothing more: no event, no log
    line) and `error` (the machine unreachable); `signals` lists the signals sent, in order.
    A SIGKILL ends the tasks it is sent to."""

    def __init__(self, name: str, bundle: Bundle, tasks: Iterable[TaskSpec]) -> None:
        super().__init__(name, bundle, tasks)
        self.alive = {t.task_id: True for t in self.tasks}
        self.stopped: set[str] = set()
        self.silent: set[str] = set()
        self.error = ""
        self.signals: list[int] = []

    def prepare(self, progress: CopyProgress | None = None) -> None:
        pass  # nothing to copy

    def port_conflicts(self) -> list[str]:
        return []

    def start(self) -> dict[str, int]:
        self.pids = {t: 1000 + i for i, t in enumerate(self.task_ids)}
        return self.pids

    def poll(self) -> MachinePoll:
        if self.error:
            return MachinePoll(self.name, error=self.error)
        return MachinePoll(self.name, {t: self._task_poll(t, time.time()) for t in self.task_ids})

    def _task_poll(self, task: str, now: float) -> TaskPoll:
        if task in self.silent:
            return TaskPoll(task, alive=self.alive[task])
        return TaskPoll(task, alive=self.alive[task], stopped=task in self.stopped,
                        events=[Event("device", task, now, {"devices": []})],
                        log_lines=[f"{task} says hello"])

    def signal(self, *sigs: int, tasks: Iterable[str] | None = None) -> None:
        self.signals.extend(sigs)
        if signal.SIGKILL in sigs:
            self.alive.update(dict.fromkeys(self.task_ids if tasks is None else tasks, False))


class FakeSlurm:
    """A login node whose Slurm answers from a table: argv[0] (or "squeue --start") -> stdout.
    `failing`: commands that fail (exit 1) as they do without Slurm's accounting."""

    def __init__(self, answers: dict[str, str], failing: set[str] | frozenset[str] = frozenset()
                 ) -> None:
        self.answers = answers
        self.failing = failing
        self.calls: list[list[str]] = []

    def run(self, argv: Sequence[str], timeout: float, *, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> tuple[int, bytes, bytes]:
        self.calls.append(list(argv))
        key = "squeue --start" if "--start" in argv else argv[0]
        if key in self.failing:
            return 1, b"", b"Slurm accounting storage is disabled\n"
        return 0, self.answers.get(key, "").encode(), b""


class _Liveness(paramiko.Transport):
    """The one thing a connector asks a connection's transport: is it active? (No socket.)"""

    def __init__(self, client: FakeSshClient) -> None:  # no Transport.__init__: no socket
        self.client = client

    def is_active(self) -> bool:
        return self.client.alive and not self.client.closed


class FakeSshClient(SSHClient):
    """A connection made earlier (a `Connector`'s `clients`), alive or dropped; `closed` once
    closed. No network."""

    def __init__(self, alive: bool = True) -> None:
        super().__init__()
        self.alive, self.closed = alive, False

    def get_transport(self) -> paramiko.Transport | None:
        return _Liveness(self)

    def close(self) -> None:
        self.closed = True


def fake_nvidia_smi(bin_dir: Path, knows_compute_cap: bool = True) -> None:
    """An `nvidia-smi` in `bin_dir` that answers as the H100 machine's did (its captured
    outputs); one of a driver too old for the `compute_cap` field when not
    `knows_compute_cap`."""
    smi = H100_PROBE.split("@@smi\n", 1)[1].split("@@end", 1)[0]
    (bin_dir / "smi-header.txt").write_text(smi)
    (bin_dir / "query.csv").write_text(H100_ROW + "\n")
    refuse = ('echo \'Field "compute_cap" is not a valid field to query.\'; exit 2'
              if not knows_compute_cap else
              f'sed "s/$/, {H100_COMPUTE_CAP}/" "$here/query.csv"; exit 0')
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        'here=$(dirname "$0")\n'
        'case "$1" in\n'
        f'  --query-gpu=*compute_cap*) {refuse} ;;\n'
        '  --query-gpu=*) cat "$here/query.csv" ;;\n'
        '  *) cat "$here/smi-header.txt" ;;\n'
        "esac\n")
    script.chmod(0o755)


def recording_python(path: Path) -> Path:
    """An executable at `path` standing in for python: it records what a task script hands
    the interpreter in files named after $DUMP (.tfconfig: $TF_CONFIG, .args: its arguments
    one a line, .cuda: $CUDA_VISIBLE_DEVICES)."""
    path.write_text("""#!/bin/sh
printf '%s\\n' "$TF_CONFIG" > "$DUMP.tfconfig"
printf '%s\\n' "$@" > "$DUMP.args"
printf '%s\\n' "$CUDA_VISIBLE_DEVICES" > "$DUMP.cuda"
""")
    path.chmod(0o755)
    return path


def use_fake_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process imports tests/fake_nvml/pynvml.py as `pynvml`, for this test only: the
    fake is put in sys.modules through monkeypatch, so that afterwards the pynvml this process
    had (or none) is back and a later test in the same process never reads the fake GPUs."""
    spec = importlib.util.spec_from_file_location("pynvml", FAKE_NVML / "pynvml.py")
    assert spec is not None and spec.loader is not None
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    monkeypatch.setitem(sys.modules, "pynvml", fake)


def pynvml_slow_to_start(folder: Path, started: Path) -> Path:
    """`folder` (made) with a `pynvml` whose nvmlInit says it has begun (it makes the file
    `started`) and holds there 30 s; put `folder` on a process's PYTHONPATH to use it."""
    folder.mkdir()
    (folder / "pynvml.py").write_text(
        "import time\n"
        "def nvmlInit():\n"
        f"    open({str(started)!r}, 'w').close()\n"
        "    time.sleep(30)\n")
    return folder


def python_with_fake_gpus(python: str, folder: Path) -> str:
    """`python` with an NVML that replays a real GPU's telemetry (tests/fake_nvml), as the
    nodes' interpreter: the tasks' telemetry reports that GPU."""
    wrapper = folder / "python-with-gpus"
    wrapper.write_text("#!/bin/sh\n"
                       f"PYTHONPATH={shlex.quote(str(FAKE_NVML))}${{PYTHONPATH:+:$PYTHONPATH}}\n"
                       f'export PYTHONPATH\nexec {shlex.quote(python)} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


class _FileOpener(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.opened: list[QUrl] = []

    @Slot(QUrl)
    def open(self, url: QUrl) -> None:
        self.opened.append(url)


@contextlib.contextmanager
def opened_file_urls() -> Iterator[list[QUrl]]:
    """While inside, the desktop's opener of file URLs (QDesktopServices) is a stand-in that
    opens nothing and lists the URLs it was given."""
    opener = _FileOpener()
    # PySide6's stub types the method name as bytes; PySide6 itself takes only a str here
    method = "open"
    QDesktopServices.setUrlHandler("file", opener, method)  # type: ignore[arg-type]  # see above
    try:
        yield opener.opened
    finally:
        QDesktopServices.unsetUrlHandler("file")
