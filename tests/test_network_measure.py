"""The network between a run's machines: the all-reduce formula, the doctor's link rows, the
measurements kept for dashboards, and the probe's timed transfer on this machine."""

from __future__ import annotations

import threading

import pytest

from dtgui.core.doctor import OK, WARN, build_checks
from dtgui.core.network_pairs import (
    LinkProbe,
    allreduce_text,
    between,
    load_links,
    ring_allreduce_seconds,
    save_links,
    slowest,
)
from dtgui.worker import machine_probe


def test_ring_allreduce_time_is_bandwidth_and_latency_terms() -> None:
    # 2(n-1)/n × bytes / bandwidth + 2(n-1) × rtt/2: 4 workers, 100 MB at 1 GB/s, 1 ms rtt
    t = ring_allreduce_seconds(100e6, 4, 1e9, rtt_ms=1.0)
    assert t == pytest.approx(1.5 * 0.1 + 6 * 0.0005)
    assert ring_allreduce_seconds(100e6, 2, 1e9) == pytest.approx(0.1)
    assert ring_allreduce_seconds(100e6, 1, 1e9) == 0.0
    link = LinkProbe("a", "b", 1, rtt_ms=0.0, bandwidth=10e6, received=1)
    assert allreduce_text(10 * 2**20, 2, link).startswith("all-reduce of 10.0 MiB over 2 workers")


def test_link_rows_warn_on_slow_links_and_say_why_not_measured() -> None:
    fast = LinkProbe("a", "b", 9, rtt_ms=0.2, bandwidth=1.2e9, received=16 << 20)
    slow = LinkProbe("a", "c", 9, rtt_ms=20, bandwidth=10e6, received=16 << 20)
    broken = LinkProbe("b", "c", 9, error="connection reset")
    rows = {c.machine: c for c in build_checks(None, {}, 9, links=[fast, slow, broken])}
    assert rows["a → b"].status == OK and "9.60 Gbit/s" in rows["a → b"].detail
    assert rows["a → c"].status == WARN and "80.0 Mbit/s" in rows["a → c"].detail
    assert "gradient accumulation" in rows["a → c"].fix
    assert rows["b → c"].status == WARN and "connection reset" in rows["b → c"].detail
    assert slowest([fast, slow, broken]) == slow


def test_kept_links_newest_per_pair(tmp_path) -> None:
    path = tmp_path / "links.json"
    save_links(path, [LinkProbe("a", "b", 1, bandwidth=1.0, measured_at=1.0),
                      LinkProbe("b", "c", 1, bandwidth=2.0, measured_at=1.0)])
    save_links(path, [LinkProbe("b", "a", 1, bandwidth=3.0, measured_at=2.0)])
    kept = load_links(path)
    assert sorted(k.bandwidth for k in kept) == [2.0, 3.0]
    assert [k.bandwidth for k in between(kept, ["a", "b"])] == [3.0]
    path.write_text("not json")
    assert load_links(path) == []


def test_the_probe_times_a_transfer_and_round_trips_here() -> None:
    port = machine_probe.choose_free_ports(1)[0]
    listener = threading.Thread(target=machine_probe.listen,
                                args=("127.0.0.1", port, b"tok", 1, 20.0), daemon=True)
    listener.start()
    for _ in range(100):
        found = machine_probe.connect("127.0.0.1", port, b"tok", 3.0, send=4 << 20)
        if found["outcome"] == "ok":
            break
    listener.join(10)
    assert found["outcome"] == "ok" and found["received"] == found["sent"] == 4 << 20
    assert found["rate"] > 1e6 and found["rtt_ms"] > 0
