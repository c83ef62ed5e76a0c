"""The cluster doctor: the comparison rules (pure), and the port and reachability checks run
from the machines themselves on the real sshd test hosts (a held port, a firewalled port)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import conftest_ssh
import netfaults
import pytest
from conftest_ssh import machine, trust
from sshhosts import SshLab

from dtgui.core.events import read_all
from dtgui.core.machines.doctor import (
    FAIL,
    OK,
    WARN,
    Check,
    PortTest,
    ReachTest,
    build_checks,
    summary,
)
from dtgui.core.machines.hardware import GpuInfo, MachineFacts, TfView
from dtgui.core.machines.registry import Machine, RemoteFacts
from dtgui.remote import doctor_checks
from dtgui.remote.connection import SSHClient, connect
from dtgui.remote.probe import probe

ssh_lab, ssh_env, real_keyring = conftest_ssh.ssh_lab, conftest_ssh.ssh_env, conftest_ssh.real_keyring
# the two test hosts' machines and connections, by name
TwoClients = tuple[dict[str, Machine], dict[str, SSHClient]]


def local(tf: str = "2.21.0", python: str = "3.11.7", gpus: int = 0,
          driver: str = "550.54") -> MachineFacts:
    return MachineFacts(hostname="here", os_name="Linux", python=python, cpu_model="cpu",
                        cpu_cores=8, ram_total=8 << 30,
                        gpus=[GpuInfo(i, "NVIDIA A100", 40 << 30, 0, 0.0, driver)
                              for i in range(gpus)],
                        tf=TfView(version=tf))


def remote(tf: str = "2.21.0", python: str = "3.11.2", gpus: int = 0, driver: str = "550.54",
           gpu_error: str = "nvidia-smi not found (no NVIDIA driver)") -> RemoteFacts:
    return RemoteFacts(hostname="r", python_path="/usr/bin/python3", python_version=python,
                       tf_version=tf, driver=driver if gpus else "",
                       gpus=[GpuInfo(i, "NVIDIA A100", 40 << 30, 0, 0.0, driver)
                             for i in range(gpus)],
                       gpu_error="" if gpus else gpu_error)


def row(checks: list[Check], machine: str, topic: str) -> Check:
    found = [c for c in checks if c.machine == machine and c.topic.startswith(topic)]
    assert len(found) == 1, (machine, topic, checks)
    return found[0]


# -- the rules ------------------------------------------------------------------------------
def test_same_versions_everywhere_is_all_ok() -> None:
    checks = build_checks(local(), {"a": remote(), "b": remote()}, 23456,
                          [PortTest("a", 23456, True), PortTest("b", 23456, True)],
                          [ReachTest("a", "b", "10.0.0.2", 23456, "ok", millis=1.5),
                           ReachTest("b", "a", "10.0.0.1", 23456, "ok", millis=2.0)])
    assert summary(checks) == (0, 0)
    assert all(c.fix == "" for c in checks)
    assert row(checks, "a → b", "Reach").detail == "Connected to 10.0.0.2:23456 in 2 ms."


def test_tensorflow_mismatch_or_missing_fails_with_a_pinned_install() -> None:
    facts = {"gpu-box-1": remote(tf="2.20.0"), "gpu-box-2": remote(tf="not installed"),
             "gpu-box-3": remote()}
    checks = build_checks(local(tf="2.21.0"), facts, 23456)
    old, missing = row(checks, "gpu-box-1", "TensorFlow"), row(checks, "gpu-box-2", "TensorFlow")
    assert old.status == missing.status == FAIL
    assert "2.20.0" in old.detail and "2.21.0" in old.detail
    assert old.fix.startswith("pip install tensorflow==2.21.0 on gpu-box-1")
    assert missing.fix.startswith("pip install tensorflow==2.21.0 on gpu-box-2")
    assert row(checks, "gpu-box-3", "TensorFlow").status == OK


def test_without_local_tensorflow_the_machines_are_compared_with_each_other() -> None:
    checks = build_checks(local(tf=""), {"a": remote("2.20.0"), "b": remote("2.20.0"),
                                         "c": remote("2.19.0")}, 1)
    here = row(checks, "this machine", "TensorFlow")
    assert here.status == FAIL and here.fix == "pip install tensorflow==2.20.0 on this machine"
    assert row(checks, "c", "TensorFlow").fix.startswith("pip install tensorflow==2.20.0 on c")
    assert row(checks, "a", "TensorFlow").status == OK


def test_python_major_minor_mismatch_is_a_warning_patch_level_is_not() -> None:
    checks = build_checks(local(python="3.11.7"), {"a": remote(python="3.10.12"),
                                                   "b": remote(python="3.11.2")}, 1)
    assert row(checks, "a", "Python").status == WARN
    assert "3.11" in row(checks, "a", "Python").fix
    assert row(checks, "b", "Python").status == OK
    no_py = RemoteFacts(tf_version="not installed", tf_error="no python3")
    checks = build_checks(local(), {"c": no_py}, 1)
    assert row(checks, "c", "Python").status == FAIL
    assert "Install Python 3 on c" in row(checks, "c", "Python").fix


def test_gpu_drivers_are_listed_and_odd_ones_flagged() -> None:
    facts = {"a": remote(gpus=2, driver="550.54.15"), "b": remote(gpus=1, driver="535.104"),
             "c": remote(gpus=1, driver="550.90"), "cpu": remote(),
             "broken": remote(gpu_error="nvidia-smi failed: couldn't communicate with the driver")}
    checks = build_checks(local(gpus=1, driver="550.40"), facts, 1)
    a = row(checks, "a", "GPUs")
    assert a.status == OK and "2 × NVIDIA A100" in a.detail and "550.54.15" in a.detail
    assert row(checks, "b", "GPUs").status == WARN and "550" in row(checks, "b", "GPUs").fix
    assert row(checks, "c", "GPUs").status == OK
    assert row(checks, "cpu", "GPUs").status == WARN  # CPU only among GPU machines
    assert row(checks, "broken", "GPUs").status == WARN
    assert "reinstall or reload" in row(checks, "broken", "GPUs").fix


def test_port_and_path_problems_each_have_a_fix() -> None:
    ports = [PortTest("a", 23456, False, "python3, pid 42"), PortTest("b", 23456, True),
             PortTest("c", 23456, None, "there is no python3 on c")]
    reach = [ReachTest("b", "a", "10.0.0.1", 23456, "untested", "port 23456 is in use on a"),
             ReachTest("a", "b", "10.0.0.2", 23456, "timeout", timeout=3),
             ReachTest("c", "b", "gpu-b.lab", 23456, "unresolved"),
             ReachTest("a", "c", "10.9.9.9", 23456, "unreachable", "No route to host"),
             ReachTest("c", "a", "10.0.0.1", 23456, "refused"),
             ReachTest("b", "c", "10.0.0.3", 23456, "other", "it sent b'HTTP/1.1'")]
    checks = build_checks(local(), {n: remote() for n in "abc"}, 23456, ports, reach)
    busy = row(checks, "a", "Port")
    assert busy.status == FAIL and "python3, pid 42" in busy.detail
    assert "another port (for example 23457)" in busy.fix
    assert row(checks, "c", "Port").status == WARN
    blocked = row(checks, "a → b", "Reach")
    assert blocked.status == FAIL and "within 3 s" in blocked.detail
    assert blocked.fix.startswith("Open TCP port 23456 in the firewall of b for a")
    assert "from <a's address>" in blocked.fix  # the source's address was not known
    assert "IP address" in row(checks, "c → b", "Reach").fix
    assert row(checks, "a → c", "Reach").status == FAIL
    assert "rejects" in row(checks, "c → a", "Reach").detail
    assert "port forwarding" in row(checks, "b → c", "Reach").fix
    assert row(checks, "b → a", "Reach").status == WARN
    assert all(c.fix for c in checks if c.status != OK)


def test_unreachable_machines_get_a_connection_row() -> None:
    checks = build_checks(local(), {"a": remote()}, 1, errors={"b": "b did not answer in 10 s."})
    conn = row(checks, "b", "Connection")
    assert conn.status == FAIL and conn.detail == "b did not answer in 10 s." and conn.fix


# -- on the real test hosts --------------------------------------------------------------------
@pytest.fixture
def two_clients(ssh_lab: SshLab, ssh_env: Path) -> Iterator[TwoClients]:
    h2, h3 = ssh_lab.hosts[0], ssh_lab.hosts[1]
    trust(h2, h3)
    machines = {h.name: machine(ssh_lab, h) for h in (h2, h3)}
    # room for the test hosts' sshd on a loaded machine
    clients = {name: connect(m, timeout=60) for name, m in machines.items()}
    yield machines, clients
    for host in (h2, h3):
        transport = clients[host.name].get_transport()
        if transport is None or not transport.is_active():  # shown with a failure: why it went
            print(f"the connection to {host.name} was closed; its sshd log ends:\n"
                  + host.log.read_text(errors="replace")[-3000:])
    for client in clients.values():
        client.close()


def test_reachable_blocked_and_busy_ports_measured_from_the_machines(
        ssh_lab: SshLab, two_clients: TwoClients, monkeypatch: pytest.MonkeyPatch) -> None:
    h2, h3 = ssh_lab.hosts[0], ssh_lab.hosts[1]
    why = netfaults.firewall_unavailable(h3)
    if why:
        pytest.skip(why)
    machines, clients = two_clients
    port = 23611
    # A listener that lives 5 minutes: a blocked pair that waited for its end, and not for the
    # connect timeout, would take that long
    monkeypatch.setattr(doctor_checks, "LISTENER_MARGIN", 300.0)
    with netfaults.firewalled(h3, port):
        t0 = time.monotonic()
        ports, reach = doctor_checks.run_doctor_checks(clients, machines, port, timeout=2.0)
        elapsed = time.monotonic() - t0
    assert [p.free for p in ports] == [True, True]
    outcomes = {(r.source, r.target): r.outcome for r in reach}
    assert outcomes == {(h2.name, h3.name): "timeout", (h3.name, h2.name): "ok"}
    # bounded by the connect timeout, not by the listener's lifetime (with room for starting
    # the machines' Python over SSH on a loaded machine)
    assert elapsed < 60
    assert netfaults.leftover_listeners(port) == []

    facts = {name: probe(client) for name, client in clients.items()}
    checks = build_checks(local(tf="2.21.0"), facts, port, ports, reach)
    blocked = row(checks, f"{h2.name} → {h3.name}", "Reach")
    assert blocked.status == FAIL and "firewall" in blocked.detail
    assert f"firewall of {h3.name}" in blocked.fix
    assert row(checks, f"{h3.name} → {h2.name}", "Reach").status == OK
    if not facts[h2.name].tf_installed:  # the hosts run this machine's system python3
        tf = row(checks, h2.name, "TensorFlow")
        assert tf.status == FAIL and tf.fix.startswith(f"pip install tensorflow==2.21.0 on {h2.name}")


def test_a_port_held_by_another_program_is_not_free(
        ssh_lab: SshLab, two_clients: TwoClients) -> None:
    h2, h3 = ssh_lab.hosts[0], ssh_lab.hosts[1]
    machines, clients = two_clients
    port = 23612
    with netfaults.held(h3, port):
        ports, reach = doctor_checks.run_doctor_checks(clients, machines, port, timeout=2.0)
    free = {p.machine: p.free for p in ports}
    if h3.netns is None:  # loopback mode: one network stack, so the port is taken on both
        assert free == {h2.name: False, h3.name: False}
        return
    assert free == {h2.name: True, h3.name: False}
    by_pair = {(r.source, r.target): r for r in reach}
    assert by_pair[(h3.name, h2.name)].outcome == "ok"
    assert by_pair[(h2.name, h3.name)].outcome == "untested"
    assert "in use" in by_pair[(h2.name, h3.name)].detail
    checks = build_checks(local(), {}, port, ports, reach)
    assert row(checks, h3.name, "Port").status == FAIL
    assert netfaults.leftover_listeners(port) == []


def test_a_listener_is_killed_when_its_source_never_arrives(
        ssh_lab: SshLab, two_clients: TwoClients) -> None:
    """The listener expects one connection; none comes: it must not outlive the check."""
    _machines, clients = two_clients
    h2 = ssh_lab.hosts[0]
    port = 23613
    listener = doctor_checks._Listener(clients[h2.name], h2.address, port, "t0ken", 1, 120)
    ready, why = listener.wait_ready(10)
    assert ready, why
    assert netfaults.leftover_listeners(port, wait=0) != []
    listener.stop()
    assert netfaults.leftover_listeners(port) == []


THROTTLED_MODEL = """
import numpy as np
import tensorflow as tf
import keras

def build_model():  # 512*2048 + 2048 + 2048*512 + 512 + 512*10 + 10 = 2.1 M parameters
    return keras.Sequential([keras.Input((512,)), keras.layers.Dense(2048, activation="relu"),
                             keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)])

def make_dataset():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 512)).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, rng.integers(0, 10, 256)))
"""


@pytest.mark.slow
def test_over_a_throttled_link_the_doctor_measures_its_rate_and_the_run_is_communication_bound(
        ssh_lab: SshLab, two_clients: TwoClients, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """h2 -> h3 limited to 400 Mbit/s, h3 -> h2 not: the doctor measures the shaped way
    slower than the other way, measured beside it as the baseline (load on this machine slows
    both transfers, so neither is held to a band around a configured rate; unshaped, the
    veth pair carries tens of Gbit/s), calls the slow way out, and
    MultiWorkerMirrored over them with a 2.1 M-parameter model (8.4 MB of gradients a step,
    about 0.17 s at that rate against a few tens of ms of computing) is found
    communication-bound."""
    import remote_python

    from dtgui.worker.step_timing import BUDGET_VARIABLE

    # a run this short is measured only when its measuring may cost any share of it
    monkeypatch.setenv(BUDGET_VARIABLE, "1e6")

    from dtgui.core.measure.bottleneck import COMMUNICATION, verdict
    from dtgui.core.measure.device_use import link_share, traffic_text
    from dtgui.core.measure.network_pairs import ring_allreduce_seconds
    from dtgui.core.plans.placement import assign
    from dtgui.core.plans.plan import ModelFile, Plan
    from dtgui.core.plans.strategies import Strategy
    from dtgui.launch.start.pipeline import launch_plan
    from dtgui.launch.targets import Target

    h2, h3 = ssh_lab.hosts[0], ssh_lab.hosts[1]
    why = netfaults.shaping_unavailable(h2)
    if why:
        pytest.skip(why)
    machines, clients = two_clients
    port, mbit = 23614, 400
    with netfaults.throttled(h2, {h3.address: mbit}, delay_ms=2):
        link, back = doctor_checks.measure_links(clients, machines, port, size=8 << 20)
        assert link.ok and back.ok, (link, back)
        assert (link.source, link.target, back.source, back.target) == (h2.name, h3.name,
                                                                        h3.name, h2.name)
        measured, other = link.bandwidth * 8 / 1e6, back.bandwidth * 8 / 1e6
        print(f"configured {mbit} Mbit/s one way, measured {measured:.1f} Mbit/s that way and "
              f"{other:.1f} Mbit/s the other, rtt {link.rtt_ms:.2f} ms")
        assert measured > 0 and other > 2 * measured, (measured, other)
        assert netfaults.leftover_listeners(port) == []
        checks = build_checks(local(), {}, port, links=[link, back])
        slow = row(checks, f"{h2.name} → {h3.name}", "Link")
        assert slow.status == WARN and "Mbit/s" in slow.detail and "All-reduce of 10 M" in slow.detail
        assert f"{h2.name} → {h3.name} runs at " in slow.fix and "slower than" in slow.fix
        assert "slower than" not in row(checks, f"{h3.name} → {h2.name}", "Link").fix

        (tmp_path / "net").mkdir()
        model = tmp_path / "net" / "wide.py"
        model.write_text(THROTTLED_MODEL)
        plan = Plan(run_name="throttled", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                    replicas_per_task=1, steps=10, steps_per_epoch=10, checkpoint_every=0,
                    seed=7, model=ModelFile(str(model)))
        python = remote_python.python_for()
        targets = [Target(h.name, machines[h.name], python=python) for h in (h2, h3)]
        controller = launch_plan(plan, targets=targets,
                                 assignments=assign(plan, machines=[h2.name, h3.name]))
        try:
            assert controller.wait(240), "the run did not end"
            assert controller.state == "finished", controller.message
            snap = controller.metrics.snapshot()
            splits = snap.splits
            bundle = controller.bundle
            events = read_all(bundle.events_file(bundle.plan.tasks[0]))
            said = [e.get("message") for e in events if e.kind == "log"
                    and e.get("level") != "info"]
        finally:
            controller.detach()
    found = verdict(splits.values())
    step = {t: (round(s.seconds_per_step, 3), round(s.communication, 3)) for t, s in
            splits.items()}
    assert snap.gradient_bytes == 2_104_842 * 4  # the model's float32 variables
    expected = ring_allreduce_seconds(snap.gradient_bytes, 2, link.bandwidth, link.rtt_ms)
    print(f"verdict: {found.text}; (seconds a step, communication) by task: {step}; "
          f"ring estimate {expected:.3f} s")
    assert found.limit == COMMUNICATION, (found.text, said)
    # measured without the training code's help: each host's traffic from its telemetry,
    # set against the link the doctor measured from it
    traffic = {t.machine: t for t in snap.device_use.traffic(
        {name: task.machine for name, task in snap.tasks.items()})}
    shares = {m: link_share(t, [link, back]) for m, t in traffic.items()}
    print("traffic:", traffic_text(list(traffic.values()), [link, back]))
    assert set(traffic) == {h2.name, h3.name}
    assert traffic[h2.name].peak_tx * 8 > 50e6  # the gradients crossed the shaped link
    h2_share = shares[h2.name]
    assert h2_share is not None and h2_share[1] is link and h2_share[0] > 0.3


def test_hostile_looking_values_are_data(
        ssh_lab: SshLab, two_clients: TwoClients) -> None:
    _machines, clients = two_clients
    client = clients[ssh_lab.hosts[0].name]
    outcome, _, _detail = doctor_checks.try_connect(client, "$(touch pwned).invalid", 1, "x; rm -rf /",
                                                   timeout=1)
    assert outcome == "unresolved"
    with pytest.raises(ValueError):
        hostile = "23456; touch pwned"  # a port that is a shell command
        doctor_checks.check_port_free(client, "h", hostile)  # type: ignore[arg-type]  # on purpose
    assert not list(ssh_lab.home.glob("pwned*"))
