"""Peak memory per task and device, through the run's one reducer: the GPU path with NVML
replaying a real H100's telemetry (tests/fake_nvml, a fake), the CPU path for real (a child
that allocates and frees, caught by its high-water mark), the warning near the limit, and the
dashboard's memory and network card."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes import FAKE_NVML, use_fake_nvml, wait_for
from pytestqt.qtbot import QtBot

from dtgui.core.events import Event, read_all
from dtgui.core.measure.memory import MemoryPeaks
from dtgui.core.measure.network_pairs import LinkTest
from dtgui.core.run_curves import RunCurves
from dtgui.worker.events import EventWriter
from dtgui.worker.telemetry import Telemetry


def device_event(task: str, devices: list[dict[str, object]], t: float) -> Event:
    return Event("device", task, t, {"devices": devices})


def test_gpu_peaks_from_nvml_replaying_an_h100(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    use_fake_nvml(monkeypatch)
    telemetry = Telemetry(EventWriter(tmp_path / "events.jsonl", "worker:0")).start()
    try:
        samples = [telemetry.sample() for _ in range(5)]
    finally:
        telemetry.stop()
    assert samples[0][0]["kind"] == "gpu" and "H100" in samples[0][0]["name"]
    curves = RunCurves()
    for i, devices in enumerate(samples):
        curves.add_event(device_event("worker:0", devices, 100.0 + i))
    [gpu] = curves.memory.devices()
    assert (gpu.task, gpu.device, gpu.peak, gpu.total) == ("worker:0", "gpu0", 1563230208,
                                                           85520809984)
    assert not gpu.near_limit and curves.memory.near_limit() == []
    # the same GPU filled to 93 %: the warning comes with what to change
    full = dict(samples[-1][0], mem_used=int(0.93 * 85520809984))
    curves.add_event(device_event("worker:0", [full], 200.0))
    [near] = curves.memory.near_limit()
    assert near.fraction == pytest.approx(0.93)
    assert near.peak == full["mem_used"]


def test_cpu_peak_is_caught_between_samples(tmp_path: Path) -> None:
    """A child allocates 300 MiB and frees it before the sample: its high-water mark stays."""
    code = ("import sys, time\nb = b'x' * (300 << 20)\ndel b\nprint('freed', flush=True)\n"
            "sys.stdin.read()\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "freed"
        [cpu] = Telemetry(EventWriter(tmp_path / "events.jsonl", "worker:0")).sample()
    finally:
        child.communicate("", timeout=10)
    assert cpu["kind"] == "cpu" and cpu["mem_peak"] >= cpu["mem_used"] + (250 << 20)
    assert 0 < cpu["mem_avail"] <= cpu["mem_total"]
    peaks = MemoryPeaks()
    peaks.add("worker:1", [cpu])
    [d] = peaks.devices()
    assert d.peak == cpu["mem_peak"] and d.used == cpu["mem_used"]
    assert d.fullest == cpu["mem_total"] - cpu["mem_avail"]  # the machine's memory in use


def test_the_tasks_own_cpu_use_and_no_sample_once_its_training_process_ended(
        tmp_path: Path) -> None:
    """A sample carries the task's own CPU use (its processes, here a child that spins) beside
    the machine's; the telemetry sends no sample once the training process ended (it would
    describe the supervisor alone: "100 % · 20 MiB" after a run that peaked at 758 MiB)."""
    spin = "import time\nend = time.time() + 30\nwhile time.time() < end: pass\n"
    child = subprocess.Popen([sys.executable, "-c", spin])
    events = tmp_path / "events.jsonl"
    try:
        telemetry = Telemetry(EventWriter(events, "worker:0"), interval=0.3,
                              alive=lambda: child.poll() is None).start()
        wait_for(lambda: len(read_all(events)) >= 2, timeout=60)
        child.kill()
        child.wait()
        sent = len(read_all(events))
        time.sleep(1.0)  # three intervals: none is sent now
        telemetry.stop()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    samples = [e.get("devices")[0] for e in read_all(events)]
    assert len(samples) in (sent, sent + 1)  # one taken as the child ended, at most
    busy = [d for d in samples[1:] if "task_util" in d]
    assert busy and max(d["task_util"] for d in busy) > 0
    assert all(0 <= d["task_util"] <= 100 and 0 <= d["util"] <= 100 for d in busy)


def test_cpu_warning_is_about_the_machine() -> None:
    peaks = MemoryPeaks()
    total = 16 << 30
    peaks.add("worker:0", [{"kind": "cpu", "index": 0, "name": "cpu", "mem_used": 2 << 30,
                            "mem_peak": 3 << 30, "mem_total": total,
                            "mem_avail": int(total * 0.05)}])
    [d] = peaks.near_limit()
    assert d.fraction == pytest.approx(0.95) and d.peak == 3 << 30


def test_the_dashboard_card_shows_peaks_warning_and_network(qtbot: QtBot) -> None:
    from dtgui.core.run_tasks import TaskState
    from dtgui.ui.plots.memory_panel import MemoryPanel, network_details, network_text

    panel = MemoryPanel()
    qtbot.addWidget(panel)
    peaks = MemoryPeaks()
    total = 85520809984
    peaks.add("worker:0", [{"kind": "gpu", "index": 0, "name": "NVIDIA H100 80GB HBM3",
                            "mem_used": int(total * 0.95), "mem_total": total}])
    peaks.add("worker:1", [{"kind": "gpu", "index": 0, "name": "NVIDIA H100 80GB HBM3",
                            "mem_used": 1563230208, "mem_total": total}])
    panel.update_memory(peaks)
    assert panel.table.rowCount() == 2
    used, share = panel.table.item(0, 2), panel.table.item(0, 4)
    assert used is not None and used.text() == "75.67 GiB"
    assert share is not None and share.text() == "95%"
    assert not panel.warning.isHidden() and "worker:0 gpu0 at 95% of 79.65 GiB" in panel.warning.text()
    link = LinkTest("h2", "h3", 23456, rtt_ms=0.4, bandwidth=10e6, received=16 << 20,
                    measured_at=1.0)
    text = network_text([link], ["h2", "h3"], 2, gradient_bytes=12 << 20)
    assert text.startswith("Network: h2 → h3 80.0 Mbit/s, 0.40 ms round trip")  # one way
    assert text.endswith("Expected all-reduce: 1.26 s a step over 2 workers (12.0 MiB).")
    assert "all-reduce" not in network_text([link], ["h2", "h3"], 2, servers=True)
    details = network_details([link], ["h2", "h3"], 2, gradient_bytes=12 << 20)
    assert "all-reduce of 12.0 MiB over 2 workers: about 1.26 s" in details
    assert "2(n-1)/n × bytes / bandwidth" in details
    panel.update_tasks({"worker:0": TaskState("worker:0", machine="h2")})
    assert "share one machine" in panel.network.text()

    # beside the communication share: the split card shows the measured links, and nothing
    # when the doctor has not measured the run's machines
    from dtgui.ui.plots.step_split import StepSplitPanel

    split_card = StepSplitPanel()
    qtbot.addWidget(split_card)
    panel.networkMeasured.connect(split_card.set_network)
    panel._loaded([link])
    panel.update_tasks({"worker:0": TaskState("worker:0", machine="h2"),
                        "worker:1": TaskState("worker:1", machine="h3")})
    assert split_card.network_label.text() == panel.network.text()
    assert split_card.network_label.text().startswith("Network: h2 → h3 80.0 Mbit/s")
    assert not split_card.network_label.isHidden()
    panel._loaded([])
    assert split_card.network_label.text() == "" and split_card.network_label.isHidden()


def test_the_fake_nvml_is_this_tests_only() -> None:
    """A test's fake pynvml is gone after it: a later test in the same process (the main
    window detecting this machine's GPUs) reads the pynvml the process had, or none."""
    before = sys.modules.get("pynvml")
    with pytest.MonkeyPatch.context() as patch:
        use_fake_nvml(patch)
        import pynvml

        assert Path(str(pynvml.__file__)) == FAKE_NVML / "pynvml.py"
    assert sys.modules.get("pynvml") is before
