"""Training across machines, with real parts: sshd test hosts in network namespaces
(tests/sshhosts.py), real TensorFlow tasks started over SSH, real signals.

The hosts share this machine's files and process table, so a test can see every process of a
run (`live_members`) - but each machine gets its own bundle directory, as separate machines do.
On CPU, TensorFlow's MultiWorkerMirrored runs one replica per worker process, so "a replica
curve per worker" means 2 hosts x 1 worker = 2 replicas (global ids 0 and 1).

One real TensorFlow run a strategy family (MultiWorkerMirrored, ParameterServer, a
single-process strategy); the run policy (stop, kill -9, SIGSTOP, an unreachable machine,
reattach, restart) is tested with the bundle's real supervisor over a stub training child
(`Lab.launch(..., stub=True)`, tests/stub_task.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

import conftest_ssh
import pytest
import sshhosts
from conftest_ssh import copy_and_start, machine, trust
from fakes import wait_for
from pytestqt.qtbot import QtBot
from runs import live_members, stub_losses, stub_python
from worker_helpers import free_ports, write_package

from dtgui.core.bundles.bundle import render_bundle
from dtgui.core.bundles.checkpoint_files import newest_checkpoint
from dtgui.core.events import STEP_KINDS, read_all, step_rows
from dtgui.core.plans.placement import assign, place_on_machines
from dtgui.core.plans.plan import ModelFile, Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.records import RunHistory, RunRecord
from dtgui.core.scripts.script import ScriptModel
from dtgui.launch.controller import LaunchError, RunController
from dtgui.launch.run_admin import RunAdminError, delete_run
from dtgui.launch.runs.policy import RunPolicy
from dtgui.launch.start.pipeline import launch_plan, reattach
from dtgui.launch.start.resume import resume_run
from dtgui.launch.start.run_check import Liveness, check_run
from dtgui.launch.targets import Target
from dtgui.worker.profile_request import REQUEST_NAME
from dtgui.worker.step_timing import BUDGET_VARIABLE

ssh_lab = conftest_ssh.ssh_lab
ssh_env = conftest_ssh.ssh_env
real_keyring = conftest_ssh.real_keyring
lab_python = conftest_ssh.lab_python_each_test  # per test: the tests spread over the workers
FOREVER = 1_000_000


class Lab:
    def __init__(self, lab: sshhosts.SshLab, python: str) -> None:
        self.lab = lab
        self.python = python
        self.hosts = {h.name: h for h in lab.hosts}

    def target(self, name: str, stub: bool = False, **kw: Any) -> Target:
        """`stub`: its tasks train with the stub child instead of TensorFlow."""
        python = sys.executable if name == "local" else self.python
        if stub:
            python = stub_python(python)
        if name == "local":
            return Target("local", python=python, **kw)
        return Target(name, machine(self.lab, self.hosts[name]), python=python, **kw)

    def launch(self, plan: Plan, placement: dict[str, str], stub: bool = False,
               **kw: Any) -> RunController:
        targets = [self.target(n, stub) for n in dict.fromkeys(placement.values())]
        return launch_plan(plan, targets=targets, assignments=placement, **kw)


@pytest.fixture
def lab(ssh_lab: sshhosts.SshLab, lab_python: str, ssh_env: Path) -> Lab:
    trust(*ssh_lab.hosts)
    return Lab(ssh_lab, lab_python)  # the launch check's memory carries on (conftest.py)


def mwms(name: str, steps: int, **kw: Any) -> Plan:
    return Plan(run_name=name, strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                replicas_per_task=1, steps=steps, steps_per_epoch=10,
                checkpoint_every=kw.pop("checkpoint_every", 0), seed=7, **kw)


def record_of(controller: RunController) -> RunRecord:
    """The run's record (launch_plan writes one for every run)."""
    assert controller.record is not None
    return controller.record


def run_pgids(controller: RunController) -> list[int]:
    return list(record_of(controller).pids().values())


def nothing_left(controller: RunController) -> None:
    wait_for(lambda: not live_members(run_pgids(controller)), 60,
             f"left running: {live_members(run_pgids(controller))}")


def losses(events_file: Path) -> dict[int, list[tuple[int, float]]]:
    """replica id -> [(step, loss)] from one task's events."""
    out: dict[int, list[tuple[int, float]]] = {}
    for e in read_all(events_file):
        rows = step_rows(e.data) if e.kind in STEP_KINDS else None
        if rows is None:
            continue
        for column, rid in enumerate(rows.replica_ids):
            out.setdefault(rid, []).extend(
                zip(rows.steps.tolist(), rows.losses[:, column].tolist(), strict=True))
    return out


def step_of(controller: RunController) -> int:
    return controller.metrics.snapshot().step


def steps_in(events_file: Path) -> int:
    """The last step an events file reports."""
    return max((step for rows in losses(events_file).values() for step, _ in rows), default=0)


# -- MultiWorkerMirrored over 2 hosts, and its exported bundle by hand ------------------------
@pytest.mark.slow
def test_mwms_over_two_hosts_then_the_exported_bundle_by_hand_is_bit_identical(
        lab: Lab, tmp_path: Path, qtbot: QtBot) -> None:
    from dtgui.ui.pages.dashboard import Dashboard

    plan = mwms("mwms2", steps=12)
    controller = lab.launch(plan, assign(plan, machines=["h2", "h3"]))
    dashboard = Dashboard()
    qtbot.addWidget(dashboard)
    dashboard.attach(controller)
    assert controller.wait(180), "the run did not end"
    assert controller.state == "finished", controller.message
    qtbot.waitUntil(lambda: dashboard.loss_panel.replica_ids() == [0, 1], timeout=60_000)
    snap = controller.metrics.snapshot()
    assert sorted(snap.replica_loss) == [0, 1]  # one curve per worker: global replica ids
    assert all(len(xs) == 12 for xs, _ in snap.replica_loss.values())
    assert set(snap.throughput) == {"worker:0", "worker:1"}  # throughput per worker
    assert set(snap.device_util) == {"h2 cpu0", "h3 cpu0"}  # each machine's CPU
    assert {t: s.machine for t, s in snap.tasks.items()} == {"worker:0": "h2", "worker:1": "h3"}
    record = RunRecord.load(controller.bundle.path)
    assert record.state == "finished" and record.final_loss == controller.final_loss
    assert [m.name for m in record.machines] == ["h2", "h3"]
    assert RunHistory().finished()[0].run_id == record.run_id
    nothing_left(controller)
    bundle = controller.bundle
    in_app = {**losses(bundle.events_file(bundle.plan.tasks[0])),
              **losses(bundle.events_file(bundle.plan.tasks[1]))}
    controller.detach()

    # Export the same placed plan; copy it to each host with scp, run it there with ssh.
    out = render_bundle(bundle.plan, tmp_path / "exported").path
    readme = (out / "README.md").read_text()
    assert "bash run.sh h2" in readme and "TF_CONFIG" in readme and \
        f"{lab.lab.hosts[0].address}:" in readme
    procs = [copy_and_start(lab.lab, lab.hosts[task.machine], out,
                            f"exported-{plan.run_name}-{task.machine}", lab.python, task.machine)
             for task in bundle.plan.tasks]
    for proc in procs:
        output, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0, output
    by_hand: dict[int, list[tuple[int, float]]] = {}
    for task in bundle.plan.tasks:
        copy = lab.lab.home / f"exported-{plan.run_name}-{task.machine}"
        by_hand.update(losses(copy / "output" / f"events-{task.file_stem}.jsonl"))
        shutil.rmtree(copy, ignore_errors=True)
    assert sorted(in_app) == [0, 1] and len(in_app[0]) == 12
    assert by_hand == in_app  # bit-identical floats, every replica, every step


# -- ParameterServer: coordinator here, 2 workers and 1 ps on separate hosts -----------------
@pytest.mark.slow
def test_parameter_server_over_three_hosts_and_this_machine_trains_and_finishes(
        lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    # 20 steps are too short to measure within 5 % of their time: measured at any cost (the
    # variable goes with the run to its hosts)
    monkeypatch.setenv(BUDGET_VARIABLE, "1e6")
    plan = Plan(run_name="ps", strategy=Strategy.PARAMETER_SERVER, workers=2, parameter_servers=1,
                replicas_per_task=1, steps=20, steps_per_epoch=10, checkpoint_every=0,
                deterministic=False, profile_steps=(11, 15))
    placement = assign(plan, chief="local", workers=["h2", "h3"], ps=["h4"])
    controller = lab.launch(plan, placement)
    cluster = controller.bundle.plan.cluster
    assert cluster["chief"][0].startswith(lab.lab.subnet + ".1:") or lab.lab.mode != "netns"
    assert not any(a.startswith("127.") for addrs in cluster.values() for a in addrs)
    assert controller.wait(240), "the run did not end"
    assert controller.state == "finished", controller.message
    snap = controller.metrics.snapshot()
    assert snap.tasks["chief:0"].status == "finished" and snap.step == 20
    assert {snap.tasks[t].status for t in ("worker:0", "worker:1", "ps:0")} == {"stopped"}
    # where each worker's step time went, measured on its host (the coordinator reports it)
    assert set(snap.splits) == {"worker:0", "worker:1"}, snap.splits
    for split in snap.splits.values():
        assert split.method == "worker-timed" and split.communication > 0
    # the plan's profile steps: the coordinator traced itself here and each worker on its
    # host, which wrote its trace into its own copy of the bundle (the folder named relative
    # to the bundle every task runs from); at the run's end they were copied here, where
    # TensorBoard and the card read them
    said = [line for line in controller.metrics.log_lines("chief:0") if "profile:" in line]
    assert len(said) == 1 and "profile: steps 11-15 captured in " in said[0] and \
        "chief-0, worker-0, worker-1" in said[0], said
    record = record_of(controller)
    for stem, where in (("chief-0", controller.bundle.path), ("worker-0", "h2"),
                        ("worker-1", "h3")):
        copy = record.machine(where) if isinstance(where, str) else None
        folder = lab.lab.home / copy.dir if copy is not None else Path(where)
        traces = list((folder / "output" / "tensorboard" / stem).glob(
            "plugins/profile/*/*.xplane.pb"))
        assert len(traces) == 1 and traces[0].stat().st_size > 0, (stem, folder)
        here = controller.bundle.output / "tensorboard" / stem / traces[0].relative_to(
            folder / "output" / "tensorboard" / stem)
        assert here.read_bytes() == traces[0].read_bytes(), here
    nothing_left(controller)
    controller.detach()


# -- a single-machine strategy on a remote machine, with a model package ---------------------
@pytest.mark.slow
def test_mirrored_model_package_with_its_data_trains_on_a_host_and_its_model_comes_back(
        lab: Lab, tmp_path: Path) -> None:
    """A model file in a package folder (a sibling module, a data file read beside it) runs on
    a remote machine from the bundle's copy of its folder, with 2 logical CPU replicas there;
    the trained model is copied back."""
    net = write_package(tmp_path / "proj")
    plan = Plan(run_name="remote-package", strategy=Strategy.MIRRORED, replicas_per_task=2, steps=4,
                steps_per_epoch=2, checkpoint_every=0,
                model=ModelFile(str(net), str(tmp_path / "proj")))
    controller = lab.launch(plan, assign(plan, machines=["h4"]))
    assert controller.bundle.plan.tasks[0].machine == "h4" and not controller.bundle.plan.cluster
    assert controller.wait(180) and controller.state == "finished", controller.message
    snap = controller.metrics.snapshot()
    assert sorted(snap.replica_loss) == [0, 1]  # 2 logical CPU replicas on h4
    assert all(len(xs) == 4 for xs, _ in snap.replica_loss.values())
    assert list(snap.device_util) == ["h4 cpu0"]
    assert (controller.bundle.output / "model" / "model.keras").is_file()  # copied back
    assert (controller.bundle.path / "project" / "mymodels" / "points.csv").is_file()
    nothing_left(controller)
    controller.detach()


# -- Stop: this machine and a host, MultiWorkerMirrored ------------------------------------------
def test_stop_ends_every_task_on_every_machine(lab: Lab) -> None:
    plan = mwms("stop", steps=FOREVER)
    controller = lab.launch(plan, assign(plan, machines=["local", "h2"]), stub=True)
    cluster = controller.bundle.plan.cluster["worker"]
    assert cluster[0].split(":")[0] != "127.0.0.1"  # this machine's address facing h2
    chief_events = controller.bundle.output / "events-worker-0.jsonl"
    # the stub's workers do not wait for each other: the chief's own steps
    wait_for(lambda: steps_in(chief_events) >= 3, 60, "the run did not start stepping")
    with pytest.raises(RunAdminError, match="still training"):  # refused: nothing removed
        delete_run(controller.bundle.path, remote=True)
    # a profile asked reaches h2's task over SSH as a stop would (the request in its copy of
    # the bundle, then the signal); the stand-in tasks take none: they are named, and the
    # run goes on
    answer = controller.request_profile(5, limit=1.0)
    assert answer == ("no profile: worker:0, worker:1 did not start the capture within 1 s "
                      "(the run goes on)"), answer
    on_h2 = record_of(controller).machine("h2")
    assert on_h2 is not None
    assert (lab.lab.home / on_h2.dir / "output" / REQUEST_NAME).read_text() == "5\n"
    assert (controller.bundle.output / REQUEST_NAME).read_text() == "5\n"
    assert controller.state == "running"
    started = time.monotonic()
    controller.request_stop()
    assert controller.wait(120)
    # Ended by the tasks themselves on SIGTERM (the chief said where it stopped, below), before
    # the save grace after which they would have been killed.
    assert time.monotonic() - started < controller.policy.save_grace
    assert controller.state == "stopped"
    assert {s.status for s in controller.metrics.snapshot().tasks.values()} == {"stopped"}
    nothing_left(controller)
    assert RunRecord.load(controller.bundle.path).state == "stopped"
    controller.detach()
    # the chief saved at the step it reached and said so, with no periodic checkpoint
    events = read_all(chief_events)
    trained = [e.data["first"] + e.data["count"] - 1 for e in events if e.kind == "steps"]
    said = [(e.data["stopped_at"], e.data["saved"]) for e in events if "stopped_at" in e.data]
    assert trained and said == [(max(trained), True)], (trained[-3:], said)
    assert [e.data["step"] for e in events if e.kind == "checkpoint"] == [max(trained)]
    assert newest_checkpoint(controller.bundle.output / "checkpoints").step == max(trained)
    # Delete (the Runs page's, `dtgui runs delete --remote`): h2's copy over SSH, then here
    copy = record_of(controller).machine("h2")
    assert copy is not None and (lab.lab.home / copy.dir / "plan.json").is_file()
    done = delete_run(controller.bundle.path, remote=True)
    assert done.local and done.removed == [f"h2:{copy.dir}"], done.text()
    assert not (lab.lab.home / copy.dir).exists() and not controller.bundle.path.exists()


# -- failures: kill -9, SIGSTOP ---------------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["kill-9", "sigstop"])
def test_a_killed_or_hung_worker_fails_the_run_within_10_s_and_nothing_is_left(
        lab: Lab, sig: int) -> None:
    plan = mwms(f"fail-{sig}", steps=FOREVER)
    controller = lab.launch(plan, assign(plan, machines=["h2", "h3"]), stub=True)
    try:
        wait_for(lambda: step_of(controller) >= 5, 60, "the run did not start stepping")
        # its error quotes its last log lines: the victim has printed one (a step's event can
        # be read before the line printed with it)
        wait_for(lambda: any(line.strip() for line in controller.metrics.log_lines("worker:1")),
                 60, "worker:1 printed no line")
        victim = record_of(controller).pids()["worker:1"]
        os.killpg(victim, sig)
        # seen at the next poll: within 10 s on an idle machine; room for a loaded one, yet
        # before the hang detector (30 s without events) would have called it hung
        seconds = wait_for(
            lambda: controller.metrics.snapshot().tasks["worker:1"].status == "failed", 25,
            "the failure was not shown within 25 s")
        assert controller.wait(60)
    finally:
        controller.request_stop()
        controller.wait(30)
    assert controller.state == "failed"
    error = controller.metrics.snapshot().tasks["worker:1"].error
    assert ("SIGSTOP" in error) if sig == signal.SIGSTOP else ("killed" in error), error
    assert "last log lines" in error and controller.message.startswith("worker:1 on h3 failed")
    print(f"{signal.Signals(sig).name}: shown as failed after {seconds:.1f} s")
    nothing_left(controller)
    assert RunRecord.load(controller.bundle.path).state == "failed"
    controller.detach()


def test_an_unreachable_machine_fails_the_run_within_10_s(lab: Lab) -> None:
    from netfaults import firewall_unavailable, firewalled

    h3 = lab.hosts["h3"]
    if firewall_unavailable(h3):
        pytest.skip(firewall_unavailable(h3))
    plan = mwms("unreachable", steps=FOREVER)
    controller = lab.launch(plan, assign(plan, machines=["h2", "h3"]), stub=True)
    h2_group = record_of(controller).pids()["worker:0"]
    try:
        wait_for(lambda: step_of(controller) >= 5, 60, "the run did not start stepping")
        with firewalled(h3, h3.port):  # SSH to h3 is dropped: no answer at all
            # the policy's 6 s without an answer, with room (x3) for a loaded machine
            seconds = wait_for(
                lambda: controller.metrics.snapshot().tasks["worker:1"].status == "failed",
                3 * controller.policy.unreachable_seconds + 5,
                "the failure was not shown in time")
            assert controller.wait(30)
            assert controller.state == "failed"
            assert "its machine h3 is unreachable" in controller.message
            wait_for(lambda: not live_members([h2_group]), 60, "worker:0 on h2 was left")
        print(f"unreachable: shown as failed after {seconds:.1f} s")
        nothing_left(controller)  # h3 answers again: its task was killed (or ended) too
    finally:
        controller.request_stop()
        controller.wait(30)
        for pgid in run_pgids(controller):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
    controller.detach()


# -- close the GUI mid-run, reopen: reattached, no gap ----------------------------------------
def test_closing_and_reopening_reattaches_without_a_gap(lab: Lab) -> None:
    plan = mwms("reattach", steps=400, log_every=1)
    first = lab.launch(plan, assign(plan, machines=["h2", "h3"]), stub=True)
    wait_for(lambda: step_of(first) >= 20, 60, "the run did not start stepping")
    first.detach()  # the GUI closes: no controller, no SSH connection; training goes on
    seen = step_of(first)
    on_h2 = Path({m.name: m.dir for m in record_of(first).machines}["h2"])
    wait_for(lambda: steps_in(on_h2 / "output" / "events-worker-0.jsonl") >= seen + 50, 60,
             "training did not go on while nobody watched")
    records = RunHistory().running()
    assert [r.run_id for r in records] == [record_of(first).run_id]
    # its tasks told over SSH by their process groups and identities at their start
    assert all(t.started for t in records[0].tasks)
    assert check_run(records[0]).verdict is Liveness.ALIVE
    second = reattach(records[0])
    try:
        assert second.wait(240), "the reattached run did not end"
    finally:
        second.request_stop()
    assert second.state == "finished", second.message
    snap = second.metrics.snapshot()
    for rid in (0, 1):
        steps = [int(x) for x in snap.replica_loss[rid][0]]
        assert steps == list(range(1, 401)), f"replica {rid} has a gap"
    assert snap.step == 400 > seen
    assert RunRecord.load(first.bundle.path).state == "finished"
    nothing_left(second)
    second.detach()


# -- restart from the last checkpoint ---------------------------------------------------------
def test_restart_from_the_last_checkpoint_when_enabled(lab: Lab) -> None:
    plan = mwms("restart", steps=80, checkpoint_every=10)
    controller = lab.launch(plan, assign(plan, machines=["h2", "h3"]), stub=True,
                            policy=RunPolicy(max_restarts=1))
    wait_for(lambda: step_of(controller) >= 25, 60, "the run did not start stepping")
    os.killpg(record_of(controller).pids()["worker:1"], signal.SIGKILL)
    assert controller.wait(240), "the run did not end"
    assert controller.state == "finished", controller.message
    assert controller.restarts == 1
    resumed = [e.get("resumed_from_step") for e in read_all(
        controller.bundle.events_file(controller.bundle.plan.tasks[1])) if e.kind == "started"]
    assert resumed[0] == 0 and resumed[-1] >= 20, resumed  # the mirror holds both runs
    nothing_left(controller)
    controller.detach()


# -- resume a stopped run: on its machines, then on others -----------------------------------
def test_a_stopped_run_resumes_on_its_machines_then_on_others(lab: Lab) -> None:
    """Stopped, resumed from its checkpoint for 30 more steps on h2 and h3, then 20 more with
    worker:0 on h3 and worker:1 on this machine (the checkpoint, the events and the logs
    copied there): one run, its curves with no step twice, a segment a stretch. A machine that is gone is refused with nothing changed.
    (The stub's workers do not step together as MultiWorkerMirrored's do: the chief's curve
    is the one without a gap.)"""
    plan = mwms("resume", steps=FOREVER, checkpoint_every=10)
    first = lab.launch(plan, assign(plan, machines=["h2", "h3"]), stub=True)
    wait_for(lambda: step_of(first) >= 25, 60, "the run did not start stepping")
    first.request_stop()
    assert first.wait(60) and first.state == "stopped", first.message
    record = RunRecord.load(first.bundle.path)
    said_running = RunRecord.from_dict({**record.to_dict(), "state": "running"})
    assert check_run(said_running).verdict is Liveness.GONE  # none left on h2 or h3
    chief = record.machine("h2")
    assert chief is not None
    at = newest_checkpoint(Path(chief.dir) / "output" / "checkpoints").step
    assert at >= 20
    second = resume_run(record, steps=at + 30)
    assert second.wait(120) and second.state == "finished", second.message
    elsewhere = {"worker:0": "h3", "worker:1": "local"}
    third = resume_run(RunRecord.load(first.bundle.path), steps=at + 50,
                       targets=[lab.target(n, stub=True) for n in ("h3", "local")],
                       assignments=elsewhere)
    assert third.wait(120) and third.state == "finished", third.message
    snap = third.metrics.snapshot()
    assert [int(x) for x in snap.replica_loss[0][0]] == list(range(1, at + 51))
    steps = [int(x) for x in snap.replica_loss[1][0]]
    assert steps == sorted(set(steps)) and steps[-50:] == list(range(at + 1, at + 51))
    for rid in (0, 1):  # each step's losses are those an uninterrupted run has at that step
        xs, ys = snap.replica_loss[rid]
        assert ys.tolist() == pytest.approx(stub_losses(xs.tolist(), rid), abs=1e-6)
    record = RunRecord.load(first.bundle.path)
    assert [(s.machines, s.from_step, s.state) for s in record.segments] == [
        (["h2", "h3"], 0, "stopped"), (["h2", "h3"], at, "finished"),
        (["h3", "local"], at + 30, "finished")]
    assert [t.machine_name for t in third.bundle.plan.tasks] == ["h3", "local"]
    on_h3 = Path(record.machines[0].dir) / "output" / "events-worker-0.jsonl"
    assert [e.kind for e in read_all(on_h3)].count("started") == 3  # as a reattach reads it
    assert [r.run_id for r in RunHistory().records()].count(record.run_id) == 1

    saved = record.path.read_bytes()
    gone = RunRecord.load(first.bundle.path)
    gone.machines[0].machine["port"] = free_ports(1)[0]
    with pytest.raises(LaunchError, match=r"cannot be reached.*nothing was changed.*h3"):
        resume_run(gone, steps=at + 60)
    assert record.path.read_bytes() == saved
    nothing_left(third)
    third.detach()


# -- refused before launch ----------------------------------------------------------------------
def test_a_machine_without_tensorflow_is_refused_before_anything_starts(
        lab: Lab, tmp_path: Path) -> None:
    plan = mwms("nopython", steps=5)
    targets = [lab.target("h2"), Target("h3", machine(lab.lab, lab.hosts["h3"]),
                                        python="/usr/bin/python3")]
    with pytest.raises(LaunchError) as info:
        launch_plan(plan, targets=targets, assignments=assign(plan, machines=["h2", "h3"]))
    text = str(info.value)
    assert "h3" in text and ("TensorFlow is not installed for /usr/bin/python3" in text
                             or "does not import" in text), text
    assert not RunHistory().records()  # nothing rendered, nothing started
    targets[1] = Target("h3", machine(lab.lab, lab.hosts["h3"]), python="/nowhere/python3")
    with pytest.raises(LaunchError, match="h3: the Python interpreter '/nowhere/python3' cannot"):
        launch_plan(plan, targets=targets, assignments=assign(plan, machines=["h2", "h3"]))
    # a user's script importing what the machine lacks: the module and the pip line to run there
    project = tmp_path / "absent-import"
    project.mkdir()
    (project / "train.py").write_text("import dtgui_test_absent_module\n")
    script = plan.with_changes(model=ScriptModel(str(project), "train.py"))
    with pytest.raises(LaunchError) as info:
        lab.launch(script, assign(script, machines=["h2", "h3"]), stub=True)
    assert "h2: the script imports dtgui_test_absent_module" in str(info.value)
    assert "-m pip install dtgui_test_absent_module" in str(info.value)
    assert not RunHistory().records()


def test_a_busy_port_on_a_remote_host_is_refused(lab: Lab) -> None:
    from netfaults import held

    plan = mwms("busy", steps=5)
    h3 = lab.hosts["h3"]
    port = 23456
    placed = place_on_machines(plan, assign(plan, machines=["h2", "h3"]),
                               {"h2": lab.hosts["h2"].address, "h3": h3.address},
                               {"h2": [port + 1], "h3": [port]})
    with held(h3, port), pytest.raises(LaunchError,
                                       match=f"Port {port} on h3 .* in use by another process"):
        lab.launch(placed, assign(plan, machines=["h2", "h3"]), keep_ports=True)
    assert not RunHistory().records()  # refused before anything was written or started
