"""The launch pipeline's own rules, without SSH hosts or TensorFlow: which steps apply to a
run on this machine alone, the targets of a placed plan, the executor factory, the connector
with the session's secrets and the fan-out over machines. (Runs across real SSH hosts:
tests/test_multihost.py; the run policy: tests/test_launch.py.)"""

from __future__ import annotations

import json
import re
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from fakes import FakeSshClient

from dtgui.core.bundles.bundle import Bundle, render_bundle
from dtgui.core.machines.registry import Machine, MachineRegistry
from dtgui.core.plans.placement import place_local, place_on_machines
from dtgui.core.plans.plan import DeviceKind, Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.records import RECORD_NAME, MachineRecord, RunRecord
from dtgui.core.runs.run_state import RunState
from dtgui.kinds.ssh.driver import ssh_target
from dtgui.kinds.ssh.executor import SshExecutor
from dtgui.launch.drivers import (
    DRIVERS,
    Driver,
    driver_for,
    local_target,
    plan_targets,
    target_of_record,
)
from dtgui.launch.exec.executor import Executor
from dtgui.launch.exec.local_exec import LocalExecutor
from dtgui.launch.launch_state import Launch
from dtgui.launch.start.pipeline import STEPS, LaunchError, launch_plan, reattach
from dtgui.launch.targets import Target
from dtgui.remote.connection import SSHClient
from dtgui.remote.connector import Connector, Secrets
from dtgui.remote.parallel import each, each_value
from dtgui.worker.machine_probe import choose_free_ports as free_ports


def test_a_run_here_skips_every_step_that_does_not_apply(
        tmp_path: Path, stub_python: Callable[..., str]) -> None:
    plan = Plan(run_name="here", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                replicas_per_task=1, steps=3, steps_per_epoch=3, checkpoint_every=0)
    controller = launch_plan(plan, tmp_path / "runs", targets=[local_target(stub_python())])
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
        ("local", "local", "", (0, 1)),
        ("h2", "ssh", "/opt/tf/bin/python", (2, 3, 4, 5))]
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
    for target in (ssh_target(h2, "python3"), target_of_record(rec)):
        ssh = driver_for(target).executor(target, bundle, rec.dir, connector=Connector())
        assert isinstance(ssh, SshExecutor)
        assert (ssh.name, ssh.task_ids, ssh.directory) == ("h2", ["worker:1"], rec.dir)
    here = target_of_record(MachineRecord("local", str(bundle.path)))
    local = driver_for(here).executor(here, bundle, str(bundle.path))
    assert isinstance(local, LocalExecutor) and local.task_ids == ["worker:0"]


class ProcessesHere(Driver):
    """A kind of target the pipeline has never heard of, registered by the test alone: its
    tasks are processes on this machine. Every protocol call is written down."""

    kind = "processes-here"

    def __init__(self, refusal: str = "") -> None:
        self.refusal = refusal
        self.calls: list[tuple[str, str]] = []

    def check(self, launch: Launch, target: Target) -> list[str]:
        self.calls.append(("check", target.name))
        return [f"{target.name} {self.refusal}"] if self.refusal else []

    def place(self, launch: Launch) -> Plan:
        self.calls.append(("place", ",".join(t.name for t in launch.targets)))
        return place_local(launch.plan, free_ports(launch.task_count(launch.targets[0])))

    def render(self, launch: Launch, target: Target, bundle: Bundle) -> None:
        self.calls.append(("render", target.name))
        (bundle.path / "processes-here.txt").write_text(target.name, encoding="utf-8")

    def executor(self, target: Target, bundle: Bundle, run_dir: str, *,
                 connector: Connector | None = None, client: SSHClient | None = None,
                 dir_ready: bool = False) -> Executor:
        self.calls.append(("executor", run_dir))
        return LocalExecutor(bundle, [t for t in bundle.plan.tasks if t.is_local],
                             target.interpreter)

    def reattach(self, rec: MachineRecord, registry: MachineRegistry | None) -> Target:
        self.calls.append(("reattach", rec.name))
        return Target(rec.name, python=rec.python, kind=self.kind)

    def cleanup(self, launch: Launch, target: Target) -> None:
        self.calls.append(("cleanup", target.name))


def test_a_kind_of_target_is_its_driver_and_one_registration(
        tmp_path: Path, stub_python: Callable[..., str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipeline launches, records and reattaches a target of a kind registered by this
    test alone, through its driver's protocol and nothing else."""
    driver = ProcessesHere()
    monkeypatch.setitem(DRIVERS, driver.kind, driver)
    here = Target(python=stub_python(), kind=driver.kind)
    plan = Plan(run_name="kind", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                replicas_per_task=1, steps=3, steps_per_epoch=3, checkpoint_every=0)
    controller = launch_plan(plan, tmp_path / "runs", targets=[here])
    assert controller.wait(60), "the run did not end"
    assert controller.state is RunState.FINISHED, controller.message
    bundle = controller.bundle.path
    assert list(controller.launch_timings) == ["check", "place", "render", "record", "start"]
    assert driver.calls == [("check", "local"), ("place", "local"), ("render", "local"),
                            ("executor", str(bundle))]
    assert (bundle / "processes-here.txt").read_text(encoding="utf-8") == "local"
    record = RunRecord.load(bundle)
    assert [(m.name, m.kind) for m in record.machines] == [("local", driver.kind)]
    again = reattach(record)
    assert driver.calls[-2:] == [("reattach", "local"), ("executor", str(bundle))]
    assert again.wait(60) and again.state is RunState.FINISHED


def test_every_drivers_refusal_is_reported_together_and_nothing_is_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    driver = ProcessesHere(refusal="is not ready.")
    monkeypatch.setitem(DRIVERS, driver.kind, driver)
    plan = Plan(run_name="refused", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                replicas_per_task=1)
    with pytest.raises(LaunchError, match=r"Not launched: a is not ready\. b is not ready\."):
        launch_plan(plan, tmp_path / "runs",
                    targets=[Target(n, kind=driver.kind) for n in ("a", "b")],
                    assignments={"worker:0": "a", "worker:1": "b"})
    assert sorted(driver.calls) == [("check", "a"), ("check", "b"), ("cleanup", "a"),
                                    ("cleanup", "b")]
    assert not (tmp_path / "runs").exists()
    with pytest.raises(LaunchError, match="no driver for targets of kind 'nowhere'"):
        launch_plan(plan, tmp_path / "runs", targets=[Target(kind="nowhere")])


def test_dtgui_run_of_a_bundle_goes_through_the_pipeline_and_records_the_run(
        tmp_path: Path, stub_python: Callable[..., str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from dtgui.cli.main import main

    out = tmp_path / "bundle"
    assert main(["export", str(out), "--strategy", "multi_worker_mirrored", "--workers", "2",
                 "--steps", "3", "--steps-per-epoch", "3", "--checkpoint-every", "0",
                 "--profile-steps", "2-3"]) == 0
    assert not (out / RECORD_NAME).exists()
    capsys.readouterr()
    # this machine's interpreter runs the tasks: here the stub's, which trains without TF
    monkeypatch.setattr(sys, "executable", stub_python(python=sys.executable))
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        assert main(["run", str(out)]) == 0, capsys.readouterr().err
    finally:
        signal.signal(signal.SIGINT, handlers[0])
        signal.signal(signal.SIGTERM, handlers[1])
    # each task's trace, when and where it was written, on the run's output
    printed = capsys.readouterr().out.splitlines()
    for task in ("worker:0", "worker:1"):
        where = out.resolve() / "output" / "tensorboard" / task.replace(":", "-")
        assert any(line.startswith(f"{task}: profile: steps 2-3 captured in {where}/plugins/"
                                   "profile (") for line in printed), printed
    record = RunRecord.load(out)
    assert record.state is RunState.FINISHED and record.bundle == str(out)
    assert [(m.name, m.dir, m.kind) for m in record.machines] == [("local", str(out), "local")]
    assert {t.task for t in record.tasks} == {"worker:0", "worker:1"}
    # outside the runs folder, it is in the history all the same: listed and shown by name
    capsys.readouterr()
    assert main(["runs", "list", "--json"]) == 0
    (row,) = [r for r in json.loads(capsys.readouterr().out) if r["run_id"] == record.run_id]
    assert row["folder"] == str(out.resolve()) and row["state"] == "finished"
    assert row["steps"] == 3
    assert main(["runs", "show", record.run_name]) == 0
    shown = capsys.readouterr().out
    assert f"folder: {out.resolve()}" in shown
    assert "    strategy: multi_worker_mirrored" in shown and "    steps: 3" in shown
    assert re.search(r"training:\n    1\. .* on local, from the start to step 3, ended .*: "
                     r"finished", shown), shown
    shutil.rmtree(out)  # gone: it leaves the list
    assert main(["runs", "list", "--json"]) == 0
    assert record.run_id not in capsys.readouterr().out
    # a bundle whose tasks are on other machines is refused before anything is written
    other = tmp_path / "other"
    registry = MachineRegistry()
    registry.add(Machine("h2", "10.0.0.2", user="me"))
    registry.save()
    assert main(["export", str(other), "--strategy", "multi_worker_mirrored",
                 "--workers-on", "local,h2", "--address", "local=10.0.0.1",
                 "--address", "h2=10.0.0.2"]) == 0
    capsys.readouterr()
    assert main(["run", str(other)]) == 2
    assert "run on other machines" in capsys.readouterr().err
    assert not (other / RECORD_NAME).exists()


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
    # All three run at the same time: each waits at the barrier for the other two, so work
    # done one after another breaks it (each result a BrokenBarrierError). Its timeout is
    # room for threads that start late on a loaded machine.
    started = threading.Barrier(3, timeout=60)

    def work(n: int) -> int:
        started.wait()
        if n == 2:
            raise ValueError("two")
        return n * 10

    results = each(work, [1, 2, 3])
    assert results[0] == 10 and results[2] == 30
    assert isinstance(results[1], ValueError)
    assert each_value(lambda n: n + 1, [1]) == [2] and each(work, []) == []

    def fails(n: int) -> int:
        raise ValueError(f"machine {n}")

    with pytest.raises(ValueError, match="machine 2"):
        each_value(fails, [2, 3])


def test_closing_a_machine_never_waits_for_a_connect_under_way() -> None:
    """A run's end closes its machines' connections: one to a machine that does not answer
    may be connecting again (up to the connect timeout) in a poll; the close returns without
    waiting for it, and the connection that comes too late is closed, not kept."""
    from dtgui.launch.exec.ssh_host import SshHost
    from dtgui.remote.connection import ConnectError

    connecting, answer = threading.Event(), threading.Event()

    class Late(FakeSshClient):
        def get_transport(self) -> None:  # no keepalive to set on a fake transport
            return None

    late = Late()

    def reconnect() -> SSHClient:
        connecting.set()
        answer.wait(120)  # longer than the close is given below
        return late

    host = SshHost("h3", reconnect, FakeSshClient(alive=False))
    raised: list[BaseException] = []

    def poll() -> None:
        try:
            host.client()
        except ConnectError as exc:
            raised.append(exc)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    assert connecting.wait(60)
    closer = threading.Thread(target=host.close, daemon=True)
    closer.start()
    closer.join(60)
    assert not closer.is_alive() and not answer.is_set()  # closed while still connecting
    answer.set()
    poller.join(60)
    assert late.closed and raised and "closed" in str(raised[0])
