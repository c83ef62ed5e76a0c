"""The launch pipeline's own rules, without SSH hosts or TensorFlow: which steps apply to a
run on this machine alone, the targets of a placed plan, the executor factory, the connector
with the session's secrets and the fan-out over machines. (Runs across real SSH hosts:
tests/test_multihost.py; the run policy: tests/test_launch.py.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fakes import FakeSshClient

from dtgui.core.bundle import render_bundle
from dtgui.core.cluster import place_local, place_on_machines
from dtgui.core.machines import Machine
from dtgui.core.plan import DeviceKind, Plan
from dtgui.core.run_state import RunState
from dtgui.core.runs import MachineRecord, RunRecord
from dtgui.core.strategies import Strategy
from dtgui.launch.local_exec import LocalExecutor
from dtgui.launch.pipeline import STEPS, LaunchError, launch_plan
from dtgui.launch.ssh_exec import SshExecutor
from dtgui.launch.targets import Target, TargetKind, make_executor, plan_targets
from dtgui.remote.connection import SSHClient
from dtgui.remote.connector import Connector, Secrets
from dtgui.remote.parallel import each, each_value
from dtgui.worker.machine_probe import choose_free_ports as free_ports


def test_a_run_here_skips_every_step_that_does_not_apply(
        tmp_path: Path, stub_python: Callable[..., str]) -> None:
    plan = Plan(run_name="here", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                replicas_per_task=1, steps=3, steps_per_epoch=3, checkpoint_every=0)
    controller = launch_plan(plan, tmp_path / "runs", targets=[Target(python=stub_python())])
    assert controller.wait(60), "the run did not end"
    assert controller.state is RunState.FINISHED, controller.message
    # nothing to connect, check, copy; the model is the built-in one
    assert list(controller.launch_timings) == ["place", "render", "record", "start"]
    assert [s.name for s in STEPS] == ["connect", "check", "place", "render", "check model",
                                       "record", "upload", "start"]
    record = RunRecord.load(controller.bundle.path)
    assert [(m.name, m.dir) for m in record.machines] == [("local", str(controller.bundle.path))]
    assert [e.__class__ for e in controller.executors] == [LocalExecutor]


def test_a_placed_plan_keeps_its_ports_here_and_a_busy_one_marks_the_record_failed(
        tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        plan = place_local(Plan(run_name="busy", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                                replicas_per_task=1), ports=[port, *free_ports(1)])
        with pytest.raises(LaunchError, match=f"Port {port} "):
            launch_plan(plan, tmp_path / "runs")
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert RunRecord.load(run_dir).state == "failed"  # listed in the history, with why


def test_a_task_on_a_machine_not_chosen_is_refused_before_anything(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="No machine named gpu-box"):
        launch_plan(Plan(run_name="x"), tmp_path / "runs", assignments={"worker:0": "gpu-box"})
    assert not (tmp_path / "runs").exists()


def test_the_targets_of_a_placed_plan_carry_each_machines_python_and_gpus() -> None:
    plan = Plan(run_name="p", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=3, replicas_per_task=2,
                device_kind=DeviceKind.GPU)
    placed = place_on_machines(
        plan, {"worker:0": "local", "worker:1": "h2", "worker:2": "h2"},
        {"local": "10.0.0.1", "h2": "10.0.0.2"}, {"local": [5000], "h2": [5001, 5002]},
        gpus={"local": [0, 1], "h2": [2, 3, 4, 5]},
        logins={"h2": {"python": "/opt/tf/bin/python"}})
    h2 = Machine("h2", "10.0.0.2", user="me")
    targets = plan_targets(placed, {"h2": h2})
    assert [(t.name, t.kind, t.python, t.gpus) for t in targets] == [
        ("local", TargetKind.LOCAL, "", (0, 1)),
        ("h2", TargetKind.SSH, "/opt/tf/bin/python", (2, 3, 4, 5))]
    assert targets[0].label == "this machine" and targets[1].interpreter == "/opt/tf/bin/python"


def test_one_executor_factory_for_a_launch_and_a_reattach(tmp_path: Path) -> None:
    plan = place_on_machines(Plan(run_name="f", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                                  replicas_per_task=1),
                             {"worker:0": "local", "worker:1": "h2"},
                             {"local": "10.0.0.1", "h2": "10.0.0.2"},
                             {"local": [5000], "h2": [5001]})
    bundle = render_bundle(plan, tmp_path / "b")
    h2 = Machine("h2", "10.0.0.2", user="me")
    rec = MachineRecord("h2", "/home/me/.cache/dtgui/runs/f/h2", "python3", "10.0.0.2",
                        h2.to_dict())
    for target in (Target("h2", h2, "python3"), Target.of_record(rec)):
        ssh = make_executor(target, bundle, rec.dir, connector=Connector())
        assert isinstance(ssh, SshExecutor)
        assert (ssh.name, ssh.task_ids, ssh.directory) == ("h2", ["worker:1"], rec.dir)
    local = make_executor(Target.of_record(MachineRecord("local", str(bundle.path))), bundle,
                          str(bundle.path))
    assert isinstance(local, LocalExecutor) and local.task_ids == ["worker:0"]


def test_the_connector_hands_out_a_connection_made_earlier_once_then_connects_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[str, str | None]] = []
    first, dead = FakeSshClient(), FakeSshClient(alive=False)
    connector = Connector(Secrets({"a": {"password": "pw-a"}}),
                          clients={"a": first, "b": dead, "c": FakeSshClient()})

    def connect(machine: Machine) -> SSHClient:
        made.append((machine.name, connector.secrets.get(machine.name, "password")))
        return FakeSshClient()

    monkeypatch.setattr(connector, "connect", connect)
    a, b = Machine("a", "10.0.0.1"), Machine("b", "10.0.0.2")
    assert connector(a) is first
    again = connector(a)  # handed out once: a dropped connection is made again
    assert again is not first and made == [("a", "pw-a")]
    assert connector(b) is not dead and made[-1] == ("b", None)
    connector.close_unused()
    assert connector.secrets.as_dict() == {"a": {"password": "pw-a"}}


def test_each_runs_at_once_keeps_the_order_and_returns_each_failure() -> None:
    started = threading.Barrier(3, timeout=5)  # all three run at the same time

    def work(n: int) -> int:
        started.wait()
        if n == 2:
            raise ValueError("two")
        return n * 10

    t0 = time.monotonic()
    results = each(work, [1, 2, 3])
    assert time.monotonic() - t0 < 5
    assert results[0] == 10 and results[2] == 30
    assert isinstance(results[1], ValueError)
    assert each_value(lambda n: n + 1, [1]) == [2] and each(work, []) == []

    def fails(n: int) -> int:
        raise ValueError(f"machine {n}")

    with pytest.raises(ValueError, match="machine 2"):
        each_value(fails, [2, 3])
