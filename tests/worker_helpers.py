"""Helpers for the worker tests: hand-written plans in a temp bundle, real subprocesses."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from dtgui.core.events import STEP_KINDS, step_rows
from dtgui.resources import DEMO_DATA

REPO = Path(__file__).resolve().parents[1]
DIGITS = DEMO_DATA
PYTHON = sys.executable


def make_plan(**overrides: Any) -> dict[str, Any]:
    plan: dict[str, Any] = {
        "schema": 1,
        "run_name": "test",
        "strategy": "one_device",
        "device_kind": "cpu",
        "replicas_per_task": 1,
        "precision": "float32",
        "xla": False,
        "communication": "auto",
        "per_replica_batch": 16,
        "steps": 4,
        "steps_per_epoch": 2,
        "learning_rate": 0.01,
        "seed": 42,
        "deterministic": True,
        "checkpoint_every": 0,
        "log_every": 1,
        "model": {"kind": "demo"},
        "tpu_address": "",
        "cluster": {},
        "tasks": [{"type": "worker", "index": 0, "host": "127.0.0.1", "port": 0, "gpus": []}],
    }
    plan.update(overrides)
    return plan


def make_bundle(root: Path, plan: dict[str, Any], user_model: str | None = None) -> Path:
    """A bundle dir holding plan.json, data/digits.npz and (optionally) user_model.py."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    shutil.copy(DIGITS, root / "data" / "digits.npz")
    if user_model is not None:
        (root / "user_model.py").write_text(user_model)
        plan = {**plan, "model": {"kind": "file", "path": "user_model.py"}}
    (root / "plan.json").write_text(json.dumps(plan, indent=2))
    return root


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def env_for(cluster: dict[str, list[str]] | None = None, task: str | None = None,
            tf_log_level: str = "1") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env["PYTHONPATH"] = str(REPO)
    env["TF_CPP_MIN_LOG_LEVEL"] = tf_log_level
    env["CUDA_VISIBLE_DEVICES"] = ""
    if cluster and task:
        kind, index = task.split(":")
        env["TF_CONFIG"] = json.dumps({"cluster": cluster,
                                       "task": {"type": kind, "index": int(index)}})
    return env


def copy_worker_package(bundle: Path) -> None:
    """Copy dtgui/worker into the bundle as ``dtgui_worker``, as the bundle renderer does."""
    shutil.copytree(REPO / "dtgui" / "worker", bundle / "dtgui_worker",
                    ignore=shutil.ignore_patterns("__pycache__"))


def start_task(bundle: Path, task: str, cluster: dict[str, list[str]] | None = None,
               out: str = "output", tf_log_level: str = "1",
               package: str = "dtgui.worker") -> subprocess.Popen[bytes]:
    """Start ``python -m <package>.train`` for one task (in its own session, like the
    launcher), logging to output/logs/<task>.log. With package="dtgui_worker" the repo is
    not on the path: the bundle's own copy runs."""
    logs = bundle / out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = open(logs / f"{task.replace(':', '-')}.log", "wb")  # noqa: SIM115
    cmd = [PYTHON, "-m", f"{package}.train", "--plan", "plan.json", "--task", task,
           "--out", out]
    env = env_for(cluster, task, tf_log_level)
    if package != "dtgui.worker":
        env.pop("PYTHONPATH", None)
    proc = subprocess.Popen(cmd, cwd=bundle, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    log.close()
    return proc


def run_task(bundle: Path, task: str = "worker:0", timeout: float = 120, out: str = "output",
             cluster: dict[str, list[str]] | None = None) -> tuple[int, list[dict[str, Any]]]:
    proc = start_task(bundle, task, cluster, out)
    return finish(proc, bundle, task, out, timeout)


def finish(proc: subprocess.Popen[bytes], bundle: Path, task: str = "worker:0",
           out: str = "output", timeout: float = 120) -> tuple[int, list[dict[str, Any]]]:
    """Wait for a started task; returns its exit code and events."""
    try:
        code = proc.wait(timeout=timeout)
    finally:
        stop(proc)
    return code, read_events(bundle, task, out)


def stop(proc: subprocess.Popen[bytes], grace: float = 10) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """Stop a ParameterServer worker or ps task: it serves on after a first stop (the
    coordinator may be saving), and ends when asked again."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.5)
    stop(proc)


def read_events(bundle: Path, task: str, out: str = "output") -> list[dict[str, Any]]:
    path = bundle / out / f"events-{task.replace(':', '-')}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def log_text(bundle: Path, task: str, out: str = "output") -> str:
    path = bundle / out / "logs" / f"{task.replace(':', '-')}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def kinds(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == kind]


GOOD_MODEL = '''
import keras
import numpy as np
import tensorflow as tf

NUM_CLASSES = 3


def build_model():
    return keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(NUM_CLASSES, dtype="float32")])


def make_dataset():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 0).astype("int32")
    print("this print must not break the JSON output")
    return tf.data.Dataset.from_tensor_slices((x, y))
'''

RAISING_MODEL = GOOD_MODEL.replace(
    "def build_model():\n",
    "def build_model():\n    raise ValueError('units must be positive')\n")

LABELS_TOO_BIG = GOOD_MODEL.replace('y = (x[:, 0] > 0).astype("int32")',
                                    'y = 7 + (x[:, 0] > 0).astype("int32")')

WRONG_INPUT = GOOD_MODEL.replace("keras.Input(shape=(4,))", "keras.Input(shape=(5,))")

MISSING_FUNCTION = GOOD_MODEL.replace("def make_dataset():", "def make_data():")

SYNTAX_ERROR = GOOD_MODEL.replace("def build_model():", "def build_model(:")


def start_module(module: str, *args: str) -> subprocess.Popen[str]:
    """``python -m dtgui.worker.<module> args`` with stdout/stderr captured."""
    return subprocess.Popen([PYTHON, "-m", f"dtgui.worker.{module}", *args], cwd=REPO,
                            env=env_for(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def json_result(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, dict[str, Any]]:
    """Exit code and the single JSON object a probe/check process printed."""
    out, err = proc.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one JSON line, got {out!r}\nstderr: {err[-2000:]}"
    return proc.returncode, json.loads(lines[0])


def step_losses(events: list[dict[str, Any]]) -> dict[int, list[float]]:
    """step -> its per-replica losses, from the `steps` batches (or schema-1 `step` events)."""
    out: dict[int, list[float]] = {}
    for e in events:
        rows = step_rows(e) if e["kind"] in STEP_KINDS else None
        if rows is not None:
            for step, losses in zip(rows.steps.tolist(), rows.losses.tolist(), strict=True):
                out[step] = losses
    return out


def step_means(events: list[dict[str, Any]]) -> dict[int, float]:
    """step -> the loss averaged over every replica of the run."""
    out: dict[int, float] = {}
    for e in events:
        rows = step_rows(e) if e["kind"] in STEP_KINDS else None
        if rows is not None:
            out.update(zip(rows.steps.tolist(), rows.means.tolist(), strict=True))
    return out


def assert_trained(code: int, events: list[dict[str, Any]], steps: int, replicas: int,
                   log: str = "") -> dict[str, Any]:
    """The task exited 0 after started, one step event per step and finished."""
    failed = kinds(events, "failed")
    assert code == 0 and not failed, (code, failed, log[-3000:])
    started = kinds(events, "started")[-1]
    assert started["replicas"] == replicas
    steps_seen = step_losses(events)
    assert sorted(steps_seen) == list(range(1, steps + 1))
    for losses in steps_seen.values():
        assert len(losses) == replicas
        assert all(isinstance(x, float) and 0.0 < x < 10.0 for x in losses)
    finished = kinds(events, "finished")
    assert len(finished) == 1 and finished[0]["steps"] == steps
    return started


PACKAGE_MODEL = {
    "mymodels/__init__.py": "",
    "mymodels/layers.py": (
        "import keras\n\n\ndef head(units):\n"
        "    return keras.layers.Dense(units, name='head')\n"),
    "mymodels/net.py": (
        "import os\n\nimport keras\nimport numpy as np\nimport tensorflow as tf\n\n"
        "from mymodels.layers import head\n\n"
        "HERE = os.path.dirname(os.path.abspath(__file__))\n\n\n"
        "def build_model():\n"
        "    return keras.Sequential([keras.Input(shape=(2,)), head(3)])\n\n\n"
        "def make_dataset():\n"
        "    rows = np.loadtxt(os.path.join(HERE, 'points.csv'), delimiter=',')\n"
        "    return tf.data.Dataset.from_tensor_slices(\n"
        "        (rows[:, :2].astype('float32'), rows[:, 2].astype('int32')))\n"),
    "mymodels/points.csv": "".join(f"{i % 7 / 7:.3f},{i % 5 / 5:.3f},{i % 3}\n"
                                   for i in range(64)),
}


def write_package(root: Path) -> Path:
    for rel, text in PACKAGE_MODEL.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root / "mymodels" / "net.py"
