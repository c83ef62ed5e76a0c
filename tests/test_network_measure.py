"""The network between a run's machines: the all-reduce formula, the doctor's link rows, the
measurements kept for dashboards, and the probe's timed transfer on this machine."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from dtgui.core.machines.doctor import OK, WARN, build_checks
from dtgui.core.measure.network_pairs import (
    LinkTest,
    allreduce_text,
    asymmetric,
    between,
    directions,
    load_links,
    pair_text,
    ring_allreduce_seconds,
    save_links,
    slowest,
)
from dtgui.ui.plots.memory_panel import network_details, network_text
from dtgui.worker import machine_probe


def test_ring_allreduce_time_is_bandwidth_and_latency_terms() -> None:
    # 2(n-1)/n × bytes / bandwidth + 2(n-1) × rtt/2: 4 workers, 100 MB at 1 GB/s, 1 ms rtt
    t = ring_allreduce_seconds(100e6, 4, 1e9, rtt_ms=1.0)
    assert t == pytest.approx(1.5 * 0.1 + 6 * 0.0005)
    assert ring_allreduce_seconds(100e6, 2, 1e9) == pytest.approx(0.1)
    assert ring_allreduce_seconds(100e6, 1, 1e9) == 0.0
    link = LinkTest("a", "b", 1, rtt_ms=0.0, bandwidth=10e6, received=1)
    assert allreduce_text(10 * 2**20, 2, link).startswith("all-reduce of 10.0 MiB over 2 workers")


def test_link_rows_warn_on_slow_links_and_say_why_not_measured() -> None:
    fast = LinkTest("a", "b", 9, rtt_ms=0.2, bandwidth=1.2e9, received=16 << 20)
    slow = LinkTest("a", "c", 9, rtt_ms=20, bandwidth=10e6, received=16 << 20)
    broken = LinkTest("b", "c", 9, error="connection reset")
    rows = {c.machine: c for c in build_checks(None, {}, 9, links=[fast, slow, broken])}
    assert rows["a → b"].status == OK and "9.60 Gbit/s" in rows["a → b"].detail
    assert rows["a → c"].status == WARN and "80.0 Mbit/s" in rows["a → c"].detail
    assert "gradient accumulation" in rows["a → c"].fix
    assert rows["b → c"].status == WARN and "connection reset" in rows["b → c"].detail
    assert slowest([fast, slow, broken]) == slow


def test_kept_links_newest_per_direction_of_each_pair(tmp_path: Path) -> None:
    path = tmp_path / "links.json"
    # a file from before both directions were measured: one link a pair, still read
    path.write_text('[{"source": "a", "target": "b", "port": 1, "bandwidth": 1.0, '
                    '"measured_at": 1.0}]')
    save_links(path, [LinkTest("b", "c", 1, bandwidth=2.0, measured_at=1.0)])
    save_links(path, [LinkTest("b", "a", 1, bandwidth=3.0, measured_at=2.0)])
    kept = load_links(path)
    assert sorted(k.bandwidth for k in kept) == [1.0, 2.0, 3.0]  # a → b and b → a both kept
    assert sorted(k.bandwidth for k in between(kept, ["a", "b"])) == [1.0, 3.0]
    save_links(path, [LinkTest("a", "b", 1, bandwidth=4.0, measured_at=3.0)])
    assert sorted(k.bandwidth for k in between(load_links(path), ["a", "b"])) == [3.0, 4.0]
    path.write_text("not json")
    assert load_links(path) == []


def test_a_direction_under_half_the_others_rate_is_called_out_with_its_likely_causes() -> None:
    up = LinkTest("a", "b", 9, rtt_ms=0.4, bandwidth=50e6, received=16 << 20)  # 400 Mbit/s
    down = LinkTest("b", "a", 9, rtt_ms=0.3, bandwidth=118e6, received=16 << 20)
    even = LinkTest("a", "c", 9, rtt_ms=0.3, bandwidth=117e6, received=16 << 20)
    back = LinkTest("c", "a", 9, rtt_ms=0.3, bandwidth=110e6, received=16 << 20)
    pairs = directions([up, down, even, back])
    assert pairs == [(up, down), (even, back)]
    assert asymmetric(up, down) is up and asymmetric(even, back) is None
    assert asymmetric(even, None) is None
    assert pair_text(up, down) == "a ↔ b 400.0 Mbit/s → / 944.0 Mbit/s ←, 0.30 ms round trip"
    rows = {c.machine: c for c in build_checks(None, {}, 9, links=[up, down, even, back])}
    assert rows["a → b"].status == WARN
    assert rows["a → b"].fix.startswith("a → b runs at 400.0 Mbit/s, 2.4× slower than b → a")
    assert "duplex mismatch" in rows["a → b"].fix and "slow for synchronous" in rows["a → b"].fix
    assert rows["b → a"].status == WARN and "2.4×" not in rows["b → a"].fix  # only slow-ish
    assert rows["a → c"].status == WARN and "slower than" not in rows["a → c"].fix
    # the dashboard's line: both ways, the slow one named, the estimate at its pace
    text = network_text([up, down], ["a", "b"], 2, 8 << 20)
    assert "a ↔ b 400.0 Mbit/s → / 944.0 Mbit/s ←" in text and "a → b is the slow way" in text
    assert f"{ring_allreduce_seconds(8 << 20, 2, up.bandwidth, up.rtt_ms) * 1000:.0f} ms" in text
    assert "2.4× slower" in network_details([up, down], ["a", "b"], 2, 8 << 20)
    # two fast ways that differ: the transfer took milliseconds, too short to tell the link
    fast = LinkTest("a", "b", 9, bandwidth=1.1e9, received=16 << 20)
    faster = LinkTest("b", "a", 9, bandwidth=3.1e9, received=16 << 20)
    assert asymmetric(fast, faster) is None


def test_the_probe_times_a_transfer_and_round_trips_here() -> None:
    port = machine_probe.choose_free_ports(1)[0]
    listener = threading.Thread(target=machine_probe.listen,
                                args=("127.0.0.1", port, b"tok", 1, 20.0), daemon=True)
    listener.start()
    deadline = time.monotonic() + 30  # the listener thread may start late on a busy machine
    found = machine_probe.reach_test("127.0.0.1", port, b"tok", 3.0, send=4 << 20)
    while found["outcome"] == "refused" and time.monotonic() < deadline:
        time.sleep(0.05)
        found = machine_probe.reach_test("127.0.0.1", port, b"tok", 3.0, send=4 << 20)
    listener.join(10)
    assert found["outcome"] == "ok" and found["received"] == found["sent"] == 4 << 20
    assert found["rate"] > 1e6 and found["rtt_ms"] > 0
