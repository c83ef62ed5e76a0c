"""Several machines without TensorFlow or SSH: placement on machines, multi-machine bundles, run
records and history, straggler detection, the remote scripts (run here with sh), and the run
policy over scripted executors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from fakes import ScriptedExecutor

from dtgui.core.bundles.bundle import render_bundle
from dtgui.core.events import Event, LineBuffer
from dtgui.core.live_run import LiveRun
from dtgui.core.measure.stragglers import find_stragglers
from dtgui.core.plans.placement import (
    PlacementError,
    assign,
    local_port_conflicts,
    place_on_machines,
)
from dtgui.core.plans.plan import MachineAccess, Plan, validate
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.records import (
    MachineRecord,
    RunHistory,
    RunRecord,
    outside_runs,
    remember_sweep,
)
from dtgui.core.runs.run_state import RunState
from dtgui.core.settings import runs_dir
from dtgui.launch.controller import RunController
from dtgui.launch.exec.executor import WRAPPER
from dtgui.launch.exec.remote_scripts import POLL_SCRIPT, START_SCRIPT, parse_pids, parse_poll
from dtgui.launch.runs.policy import RunPolicy, exit_text

ADDR = {"local": "10.0.0.1", "a": "10.0.0.2", "b": "10.0.0.3", "c": "10.0.0.4"}
PORTS = {"local": [5000, 5001], "a": [6000, 6001], "b": [7000], "c": [8000]}


def mwms(**kw: Any) -> Plan:
    return Plan(run_name="mh", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                replicas_per_task=1, steps=5, checkpoint_every=0, **kw)


# -- placement ----------------------------------------------------------------------------------
def test_mwms_places_one_worker_per_machine_with_reachable_addresses() -> None:
    plan = mwms()
    placed = place_on_machines(plan, assign(plan, machines=["local", "a"]), ADDR, PORTS)
    assert [(t.task_id, t.machine_name, t.address) for t in placed.tasks] == [
        ("worker:0", "local", "10.0.0.1:5000"), ("worker:1", "a", "10.0.0.2:6000")]
    assert placed.cluster == {"worker": ["10.0.0.1:5000", "10.0.0.2:6000"]}
    assert placed.is_multi_machine and placed.machine_names == ["local", "a"]
    assert placed.machines["a"] == MachineAccess(address="10.0.0.2")
    assert validate(placed) == []
    again = Plan.from_dict(json.loads(placed.to_json()))
    assert again == placed  # machine names and the machines table survive plan.json


def test_parameter_server_roles_go_where_they_are_assigned() -> None:
    plan = Plan(strategy=Strategy.PARAMETER_SERVER, workers=2, parameter_servers=1,
                replicas_per_task=1)
    placement = assign(plan, chief="local", workers=["a", "b"], ps=["c"])
    assert placement == {"chief:0": "local", "worker:0": "a", "worker:1": "b", "ps:0": "c"}
    placed = place_on_machines(plan, placement, ADDR, PORTS)
    assert placed.cluster == {"chief": ["10.0.0.1:5000"], "ps": ["10.0.0.4:8000"],
                              "worker": ["10.0.0.2:6000", "10.0.0.3:7000"]}
    with pytest.raises(PlacementError, match="2 worker"):
        assign(plan, chief="local", workers=["a"], ps=["c"])


def test_one_machine_alone_uses_loopback_and_a_single_task_strategy_runs_remotely() -> None:
    plan = mwms()
    placed = place_on_machines(plan, assign(plan, machines=["a", "a"]), {}, PORTS)
    assert placed.cluster == {"worker": ["127.0.0.1:6000", "127.0.0.1:6001"]}
    single = Plan(strategy=Strategy.MIRRORED, replicas_per_task=2)
    placed = place_on_machines(single, assign(single, machines=["b"]), {}, {})
    assert [(t.machine, t.port) for t in placed.tasks] == [("b", 0)] and placed.cluster == {}
    assert placed.machines == {"b": MachineAccess(address="127.0.0.1")}


def test_loopback_missing_addresses_and_port_clashes_are_refused() -> None:
    plan = mwms()
    with pytest.raises(PlacementError, match="loopback"):
        place_on_machines(plan, assign(plan, machines=["local", "a"]),
                          {**ADDR, "local": "127.0.0.1"}, PORTS)
    with pytest.raises(PlacementError, match="No network address is known for a"):
        place_on_machines(plan, assign(plan, machines=["local", "a"]), {"local": "10.0.0.1"},
                          PORTS)
    with pytest.raises(PlacementError, match="would share port 6000"):
        place_on_machines(plan, assign(plan, machines=["a", "a"]), {}, {"a": [6000, 6000]})
    with pytest.raises(PlacementError, match="No free port left on b"):
        three = mwms().with_changes(workers=3)
        place_on_machines(three, assign(three, machines=["a", "b", "b"]), ADDR, PORTS)
    bad = place_on_machines(plan, assign(plan, machines=["local", "a"]), ADDR, PORTS)
    bad = bad.with_changes(tasks=(bad.tasks[0].__class__("worker", 0, "127.0.0.1", 1, (), ""),
                                  bad.tasks[1]))
    assert any("cannot reach" in p for p in validate(bad))


def test_gpu_choice_per_machine_reaches_cuda_visible_devices(tmp_path: Path) -> None:
    plan = mwms(device_kind="gpu").with_changes(replicas_per_task=2)
    placed = place_on_machines(plan, assign(plan, machines=["a", "b"]), ADDR,
                               {"a": [1], "b": [2]}, gpus={"a": [2, 3], "b": [0, 1]})
    assert [t.gpus for t in placed.tasks] == [(2, 3), (0, 1)]
    bundle = render_bundle(placed, tmp_path / "b")
    assert "export CUDA_VISIBLE_DEVICES=2,3" in bundle.task_script(placed.tasks[0]).read_text()
    with pytest.raises(PlacementError, match="too few chosen GPUs"):
        place_on_machines(plan, assign(plan, machines=["a", "b"]), ADDR, {"a": [1], "b": [2]},
                          gpus={"a": [0], "b": [0, 1]})


def test_local_port_conflicts_only_check_this_machines_tasks() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        port = sock.getsockname()[1]
        plan = mwms()
        placed = place_on_machines(plan, assign(plan, machines=["local", "a"]), ADDR,
                                   {"local": [port], "a": [port]})
        problems = local_port_conflicts(placed)
    assert len(problems) == 1 and f"Port {port} (task worker:0)" in problems[0]


# -- the multi-machine bundle -------------------------------------------------------------------
def test_multi_machine_bundle_readme_and_run_sh(tmp_path: Path) -> None:
    plan = Plan(run_name="ps3", strategy=Strategy.PARAMETER_SERVER, workers=2, parameter_servers=1,
                replicas_per_task=1)
    placed = place_on_machines(plan, assign(plan, chief="local", workers=["a", "b"], ps=["c"]),
                               ADDR, PORTS, logins={"a": {"login": "me@10.0.0.2:2222",
                                                          "python": "/opt/py/bin/python3"}})
    bundle = render_bundle(placed, tmp_path / "b")
    readme = (bundle.path / "README.md").read_text()
    assert "scp -r -P 2222 . me@10.0.0.2:dtgui-ps3" in readme
    assert "ssh -p 2222 me@10.0.0.2 'cd dtgui-ps3 && PYTHON=/opt/py/bin/python3 bash run.sh a'" \
        in readme
    assert readme.count("export TF_CONFIG=") == 4 and "### ps:0 on c" in readme
    run = subprocess.run(["bash", str(bundle.path / "run.sh")], capture_output=True, text=True)
    assert run.returncode == 2 and "MACHINE is one of: local a b c" in run.stderr
    text = (bundle.path / "run.sh").read_text()
    assert "  c) TASKS=(ps-0); PRIMARIES=() ;;" in text
    assert "  local) TASKS=(chief-0); PRIMARIES=(chief-0) ;;" in text


# -- run records and the history ---------------------------------------------------------------
def test_run_records_and_history(tmp_path: Path) -> None:
    old = RunRecord("r1-aaaaaa", "r1", str(tmp_path / "r1"), "mirrored", created=1.0,
                    state=RunState.FINISHED, final_loss=0.5)
    new = RunRecord("r2-bbbbbb", "r2", str(tmp_path / "r2"), "multi_worker_mirrored",
                    created=2.0, state=RunState.RUNNING,
                    machines=[MachineRecord("h2", "/home/u/.cache/dtgui/runs/r2/h2", "python3",
                                            "10.0.0.2", {"name": "h2", "host": "10.0.0.2"})])
    new.set_started("worker:0", "h2", pid=4242)
    for record in (old, new):
        record.save()
    legacy = tmp_path / "r0"
    (legacy / "output").mkdir(parents=True)
    (legacy / "plan.json").write_text(json.dumps({"run_name": "r0", "strategy": "one_device"}))
    (legacy / "output" / "events-worker-0.jsonl").write_text(
        '{"v":1,"kind":"step","task":"worker:0","t":1,"loss":0.9}\n'
        '{"v":1,"kind":"finished","task":"worker:0","t":2,"loss":0.7}\n')
    os.utime(legacy / "plan.json", (0.5, 0.5))
    history = RunHistory(tmp_path)
    assert [r.run_id for r in history.records()] == ["r2-bbbbbb", "r1-aaaaaa", "r0"]
    assert [r.run_id for r in history.running()] == ["r2-bbbbbb"]
    loaded = history.find("r2-bbbbbb")
    assert loaded is not None
    assert loaded.pids() == {"worker:0": 4242} and loaded.is_multi_machine
    assert loaded.machines[0].machine["host"] == "10.0.0.2"
    r0 = history.find("r0")
    assert r0 is not None and (r0.state, r0.final_loss) == ("finished", 0.7)
    assert "password" not in (tmp_path / "r2" / "run.json").read_text()


def test_every_run_outside_the_runs_folder_is_in_one_register_listed_and_live_once(
        tmp_path: Path) -> None:
    def saved(run_id: str, folder: Path, state: RunState) -> RunRecord:
        folder.mkdir(parents=True)
        record = RunRecord(run_id, run_id, str(folder), created=time.time(), state=state)
        record.save()
        return record

    inside = saved("in", runs_dir() / "in", RunState.RUNNING)
    bundle = saved("bundle", tmp_path / "bundles" / "b", RunState.RUNNING)  # `dtgui run B`
    sweep = tmp_path / "sweeps" / "lr"
    trial = saved("trial", sweep / "trials" / "lr-0", RunState.RUNNING)
    assert outside_runs() == [Path(bundle.bundle).resolve(), Path(trial.bundle).resolve()]
    history = RunHistory()
    assert sorted(r.run_id for r in history.live()) == ["bundle", "in", "trial"]
    # a trial is listed on its own until its sweep is: then under it alone
    assert sorted(r.run_id for r in history.records()) == ["bundle", "in", "trial"]
    remember_sweep(sweep)
    assert sorted(r.run_id for r in history.records()) == ["bundle", "in"]
    assert sorted(r.run_id for r in history.live()) == ["bundle", "in", "trial"]  # it holds
    for record in (inside, bundle, trial):
        record.end(RunState.FINISHED, "", None)
        record.save()  # saved again: still once in the register
    assert not history.live()
    assert outside_runs() == [Path(bundle.bundle).resolve(), Path(trial.bundle).resolve()]


# -- stragglers ---------------------------------------------------------------------------------
def test_a_clearly_slower_worker_is_flagged() -> None:
    xs = np.arange(20.0)
    fast = (xs, np.full(20, 1000.0))
    assert find_stragglers({"worker:0": fast, "worker:1": fast}) == {}
    found = find_stragglers({"worker:0": fast, "worker:1": fast,
                             "worker:2": (xs, np.full(20, 400.0))})
    assert list(found) == ["worker:2"] and found["worker:2"] == pytest.approx(0.4)
    assert find_stragglers({"worker:0": fast, "chief:0": (xs, np.full(20, 1.0))}) == {}


def test_device_curves_are_labelled_with_their_machine() -> None:
    metrics = LiveRun()
    metrics.set_task_machine("worker:1", "h3")
    metrics.add_events([Event("device", "worker:1", 5.0, {"devices": [
        {"kind": "cpu", "index": 0, "util": 50.0, "mem_used": 2**20}]})])
    assert list(metrics.snapshot().device_util) == ["h3 cpu0"]
    assert metrics.snapshot().tasks["worker:1"].machine == "h3"


# -- the remote scripts, run here with sh --------------------------------------------------------
def wait_stopped(pgid: int, timeout: float = 60) -> None:
    """Until every process of the group has taken its SIGSTOP: a process waiting for a core
    shows R with the signal pending until it runs (a loaded machine showed that)."""
    deadline = time.monotonic() + timeout
    while True:
        group = [p for p in psutil.process_iter(["status"])
                 if _pgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE]
        if group and all(p.info["status"] == psutil.STATUS_STOPPED for p in group):
            return
        assert time.monotonic() < deadline, [(p.pid, p.info["status"]) for p in group]
        time.sleep(0.02)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_start_and_poll_scripts_with_real_processes(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "worker-0.sh").write_text(
        "printf 'h\\303\\251llo\\n\\377 bad byte\\n'\nexec sleep 30\n")
    (tmp_path / "tasks" / "worker-1.sh").write_text("echo done; exit 3\n")
    out = subprocess.run(["sh", "-s", "--", str(tmp_path), "python3", WRAPPER, "worker-0",
                          "worker-1"], input=START_SCRIPT, capture_output=True, text=True,
                         timeout=20)
    pids = parse_pids(out.stdout)
    assert set(pids) == {"worker-0", "worker-1"}, out.stdout + out.stderr
    try:
        assert os.getpgid(pids["worker-0"]) == pids["worker-0"]  # its own process group
        (tmp_path / "output" / "events-worker-0.jsonl").write_bytes(b'{"v":1}\n{"v":1,"part')
        deadline = time.monotonic() + 10
        while not (tmp_path / "output" / "pids" / "worker-1.exit").exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.killpg(pids["worker-0"], signal.SIGSTOP)
        wait_stopped(pids["worker-0"])
        args = [str(tmp_path), "1000", "worker-0", str(pids["worker-0"]), "0", "0",
                "worker-1", str(pids["worker-1"]), "0", "0"]
        raw = subprocess.run(["sh", "-s", "--", *args], input=POLL_SCRIPT.encode(),
                             capture_output=True, timeout=20).stdout
        poll = parse_poll(raw)
        assert poll.complete and poll.now is not None
        assert "T" in poll.states[pids["worker-0"]]
        # ended (a zombie for a moment, until its parent reaps it: the launcher ignores those)
        assert [s for s in poll.states.get(pids["worker-1"], []) if s != "Z"] == []
        assert poll.exits == {"worker-0": None, "worker-1": 3}
        assert poll.data[("worker-0", "log")] == (0, "héllo\n".encode() + b"\xff bad byte\n")
        events = poll.data[("worker-0", "ev")]
        buf = LineBuffer()
        assert buf.take(events[1], events[0]) == b'{"v":1}\n' and buf.offset == 8
    finally:
        os.killpg(pids["worker-0"], signal.SIGKILL)


# -- the run policy over scripted executors -----------------------------------------------------
def scripted_run(
        tmp_path: Path, policy: RunPolicy
        ) -> tuple[RunController, ScriptedExecutor, ScriptedExecutor]:
    plan = mwms()
    placed = place_on_machines(plan, assign(plan, machines=["a", "b"]), ADDR, PORTS)
    bundle = render_bundle(placed, tmp_path / "b")
    a = ScriptedExecutor("a", bundle, [placed.tasks[0]])
    b = ScriptedExecutor("b", bundle, [placed.tasks[1]])
    controller = RunController(bundle, executors=[a, b], policy=policy)
    controller.start()
    return controller, a, b


def test_an_unreachable_machine_fails_its_tasks_and_the_rest_is_stopped(tmp_path: Path) -> None:
    policy = RunPolicy(unreachable_seconds=1.0, stop_grace=0.5)
    controller, a, b = scripted_run(tmp_path, policy)
    time.sleep(0.5)
    b.error = "timed out"
    started = time.monotonic()
    assert controller.wait(60)
    # Bounded by the policy's limits (unreachable, then the grace and the 5 s after SIGKILL),
    # with room for a loaded machine, and far from the hang detector's 30 s default
    limit = policy.unreachable_seconds + policy.stop_grace + 5
    assert time.monotonic() - started < 3 * limit
    assert controller.state == "failed"
    assert "machine b is unreachable (timed out)" in controller.message
    assert "worker:1 says hello" in controller.message  # its last log lines
    assert signal.SIGTERM in a.signals and signal.SIGKILL in a.signals


def test_a_task_that_stops_writing_events_is_hung(tmp_path: Path) -> None:
    controller, _a, b = scripted_run(tmp_path, RunPolicy(stale_seconds=1.0, stop_grace=0.5))
    b.silent.add("worker:1")
    assert controller.wait(60)
    assert controller.state == "failed" and "no event for 1 s" in controller.message


def test_exit_texts() -> None:
    assert "killed (SIGKILL?)" in exit_text(None, True)
    assert "SIGKILL" in exit_text(-9, True) and "SIGKILL" in exit_text(137, False)
    assert "server" in exit_text(0, False)
    assert "interpreter was not found" in exit_text(127, True)
