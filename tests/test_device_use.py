"""What is measured of a run without its code's help: each device's use while its task
trains (idle gaps), each machine's network traffic, the card that shows them and the split
card's line for a script that gives no split. The traffic over a real link between two SSH
test hosts is in tests/test_doctor.py (the throttled run)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import use_fake_nvml
from pytestqt.qtbot import QtBot
from widgets import cell_text

from dtgui.core.events import Event
from dtgui.core.live_run import LiveRun
from dtgui.core.measure.device_use import (
    IDLE_UTIL,
    DeviceUse,
    Traffic,
    link_share,
    traffic_line,
    traffic_text,
    unhelped_summary,
)
from dtgui.core.measure.network_pairs import LinkTest
from dtgui.core.run_curves import RunCurves
from dtgui.worker.events import EventWriter
from dtgui.worker.telemetry import NetworkTraffic, Telemetry


def event(kind: str, task: str, t: float, **data: object) -> Event:
    return Event(kind, task, t, data)


def test_a_gpus_use_while_training_from_nvml_replaying_an_h100_and_its_idle_gaps(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_fake_nvml(monkeypatch)
    telemetry = Telemetry(EventWriter(tmp_path / "events.jsonl", "worker:0")).start()
    try:
        samples = [telemetry.sample() for _ in range(5)]  # 63, 95, 98, 97, 97 %
    finally:
        telemetry.stop()
    curves = RunCurves()
    curves.add_event(event("device", "worker:0", 99.0, devices=samples[0]))  # before training
    curves.add_event(event("started", "worker:0", 100.0, steps=100))
    for i, devices in enumerate(samples):
        curves.add_event(event("device", "worker:0", 101.0 + i, devices=devices))
    [gpu] = curves.device_use.devices()
    assert (gpu.task, gpu.device, gpu.kind, gpu.samples) == ("worker:0", "gpu0", "gpu", 5)
    assert gpu.mean_util == pytest.approx(90.0) and gpu.idle_share == 0
    assert gpu.text == "90 % busy, idle 0 % of the time"
    # the same GPU starved half the time (utilisation under IDLE_UTIL between the busy samples)
    starved = [dict(d[0], util=IDLE_UTIL / 2) for d in samples]
    for i, device in enumerate(starved):
        curves.add_event(event("device", "worker:0", 110.0 + i, devices=[device]))
    [gpu] = curves.device_use.devices()
    assert gpu.idle_share == pytest.approx(0.5) and gpu.samples == 10
    curves.add_event(event("finished", "worker:0", 120.0))
    curves.add_event(event("device", "worker:0", 121.0, devices=[starved[0]]))  # saving: not counted
    assert curves.device_use.devices()[0].samples == 10
    said = unhelped_summary(curves.device_use.devices(), [])
    assert said == ("Measured without its help: worker:0 gpu0 48 % busy, idle 50 % of the time "
                    "— it waits (for input, the other workers or the host).")


def test_the_machines_traffic_is_counted_once_and_set_against_the_measured_link() -> None:
    use = DeviceUse()
    for task in ("chief:0", "worker:0", "worker:1", "ps:0"):
        use.started(task)
    net = {"worker:0": (30e6, 46e6), "ps:0": (31e6, 45e6), "worker:1": (44e6, 29e6),
           "chief:0": (0.1e6, 0.1e6)}
    for task, (rx, tx) in net.items():
        use.add(task, [], {"rx": rx, "tx": tx})
    use.add("worker:1", [], {"rx": 1.0, "tx": "junk"})  # ignored
    use.add("worker:1", [], {"rx": 2e6, "tx": 1e6})  # later, quieter: the peak stays
    machines = {"chief:0": "this machine", "worker:0": "h2", "ps:0": "h2", "worker:1": "h3"}
    traffic = use.traffic(machines)
    # h2 once: its first task by name (ps:0) speaks for it
    assert [t.machine for t in traffic] == ["this machine", "h2", "h3"]
    h3 = traffic[2]
    assert (h3.rx, h3.tx, h3.peak_rx, h3.peak_tx) == (2e6, 1e6, 44e6, 29e6)
    link = LinkTest("h2", "h3", 1, bandwidth=50e6, received=16 << 20)  # 400 Mbit/s
    back = LinkTest("h3", "h2", 1, bandwidth=125e6, received=16 << 20)
    share = link_share(traffic[1], [link, back])
    assert share is not None and share[0] == pytest.approx(0.9) and share[1] is link
    text = traffic_text(traffic, [link, back])
    assert text.startswith("Traffic: this machine in 0.8 Mbit/s")
    assert "h2 in 248.0 Mbit/s (peak 248.0 Mbit/s), out 360.0 Mbit/s (peak 360.0 Mbit/s): " \
        "90 % of the 400.0 Mbit/s h2 → h3 link" in text
    assert traffic_line(traffic, [link, back]) == (
        "Sent at peak: this machine 0.8 Mbit/s; h2 360.0 Mbit/s (90 % of its link); "
        "h3 232.0 Mbit/s (23 % of its link)")
    said = unhelped_summary([], traffic, [link, back])
    assert said == ("Measured without its help: h2 sent at up to 90 % of its 400.0 Mbit/s link "
                    "to h3: the network is likely the limit.")
    assert unhelped_summary([], [Traffic("h2", peak_tx=1e6)], [link]) == ""


@pytest.fixture
def veth_peer() -> Iterator[str]:
    """A network namespace behind a veth pair (a link as between two machines): its address.
    Needs root and iproute2, as the SSH test hosts do."""
    if shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("needs root and iproute2 (ip)")
    ns, here, there = f"dtgnt{os.getpid()}", f"dtgva{os.getpid()}", f"dtgvb{os.getpid()}"
    octet = 1 + os.getpid() % 250

    def ip(*argv: str) -> None:
        subprocess.run(["ip", *argv], check=True, capture_output=True, timeout=10)

    ip("netns", "add", ns)
    try:
        ip("link", "add", here, "type", "veth", "peer", "name", there)
        ip("link", "set", there, "netns", ns)
        ip("addr", "add", f"10.211.{octet}.1/24", "dev", here)
        ip("link", "set", here, "up")
        ip("netns", "exec", ns, "ip", "addr", "add", f"10.211.{octet}.2/24", "dev", there)
        ip("netns", "exec", ns, "ip", "link", "set", there, "up")
        yield f"10.211.{octet}.2"
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


SINK = """
import socket, sys
server = socket.create_server((sys.argv[1], 0))
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
while conn.recv(1 << 16):
    pass
"""


def test_the_telemetry_counts_the_bytes_a_real_transfer_sends_over_a_link(
        veth_peer: str) -> None:
    """8 MiB sent to a listener in another network namespace leave by this machine's veth
    interface: the counter's sent bytes a second, over the transfer, account for them."""
    ns = f"dtgnt{os.getpid()}"
    sink = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", SINK, veth_peer],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout is not None
        port = int(sink.stdout.readline())
        counter = NetworkTraffic()
        # the counter's own interval runs from the start of this call to the start of the
        # next: these seconds hold it whole, however long reading the counters takes
        began = time.monotonic()
        assert counter.rates() == {}  # the first call only starts the count
        with socket.create_connection((veth_peer, port), timeout=10) as conn:
            conn.sendall(b"x" * (8 << 20))
        time.sleep(0.2)  # the last segments' counters
        rates = counter.rates()
        seconds = time.monotonic() - began
    finally:
        sink.wait(timeout=10)
    assert set(rates) == {"rx", "tx"}
    # every byte sent crossed the veth (other tests' traffic may add to the machine's)
    assert rates["tx"] * seconds >= 8 << 20


def test_the_card_shows_each_devices_use_and_the_traffic_and_the_split_card_the_summary(
        qtbot: QtBot) -> None:
    from fakes import FakeRun

    from dtgui.ui.pages.dashboard import Dashboard
    from dtgui.worker.plan import Plan, ScriptModel
    from dtgui.worker.strategies import Strategy

    metrics = LiveRun(100)
    for task, machine in (("worker:0", "h2"), ("worker:1", "h3")):
        metrics.set_task_machine(task, machine)
    events = [event("started", "worker:0", 100.0, steps=100, replica_ids=[0]),
              event("started", "worker:1", 100.0, steps=100, replica_ids=[1])]
    for i in range(4):
        for task, util in (("worker:0", 96.0), ("worker:1", 3.0 if i % 2 else 80.0)):
            events.append(event("device", task, 102.0 + 2 * i, net={"rx": 40e6, "tx": 45e6},
                                devices=[{"kind": "gpu", "index": 0, "name": "NVIDIA H100",
                                          "util": util, "mem_used": 8 << 30,
                                          "mem_total": 80 << 30}]))
    metrics.add_events(events)
    plan = Plan(run_name="script", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                model=ScriptModel("/tmp", "train.py"))
    dash = Dashboard()
    qtbot.addWidget(dash)
    dash.attach(FakeRun(metrics, plan=plan))
    dash._text_time = 0.0
    dash.refresh()
    panel = dash.memory_panel
    rows = {(cell_text(panel.table, r, 0), cell_text(panel.table, r, 1)):
            cell_text(panel.table, r, 5) for r in range(panel.table.rowCount())}
    assert rows == {("worker:0", "gpu0"): "96 % / 0 %", ("worker:1", "gpu0"): "42 % / 50 %"}
    assert not panel.traffic.isHidden()
    assert panel.traffic.text() == "Sent at peak: h2 360.0 Mbit/s; h3 360.0 Mbit/s"
    assert panel.traffic.toolTip().startswith(
        "Traffic: h2 in 320.0 Mbit/s (peak 320.0 Mbit/s), out 360.0 Mbit/s (peak 360.0 "
        "Mbit/s); h3 in")
    split = dash.step_split
    assert split.isVisibleTo(dash)
    text = split.verdict_label.text()
    assert "dtgui_worker.report" in text
    assert "worker:1 gpu0 42 % busy, idle 50 % of the time — it waits" in text
    # one machine: its tasks talk over loopback, no traffic line
    solo = LiveRun(100)
    solo.add_events(events[:1])
    dash.attach(FakeRun(solo, plan=plan))
    dash.refresh()
    assert panel.traffic.isHidden()


def test_a_scripts_devices_count_from_its_first_number_not_from_its_start() -> None:
    """A script starts (imports, reads its data) before it trains: its idle samples then are
    not gaps in training."""
    curves = RunCurves()
    cpu = {"kind": "cpu", "index": 0, "name": "CPU", "util": 2.0, "mem_used": 1 << 30}
    curves.add_event(event("started", "worker:0", 100.0, script="train.py", steps=10))
    curves.add_event(event("device", "worker:0", 101.0, devices=[cpu]))
    assert curves.device_use.devices() == []
    curves.add_event(event("progress", "worker:0", 102.0, unit="step", done=1, total=10))
    curves.add_event(event("device", "worker:0", 103.0, devices=[dict(cpu, util=88.0)]))
    [busy] = curves.device_use.devices()
    assert (busy.samples, busy.mean_util) == (1, 88.0)
