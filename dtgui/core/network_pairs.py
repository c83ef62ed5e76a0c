"""The network between a run's machines: what the doctor measured on each pair, and what it
means for a training step (pure Python).

Each pair is measured on the port training uses (`dtgui.remote.doctor_checks.measure_links`,
through the machine probe's `connect --send`): five round trips (the median is kept) and a
transfer of `TRANSFER_BYTES` (sent for at most `TRANSFER_LIMIT` s), whose rate the receiving
machine times from its first quarter on, so TCP's slow start does not count.

The expected all-reduce time is the ring algorithm's (Patarasuk and Yuan; NCCL's and
TensorFlow's RING collectives): with n participants each sends and receives 2(n-1)/n of the
gradient bytes, in 2(n-1) steps, each paying the link's one-way latency (half a round trip):

    T = 2(n-1)/n × bytes / bandwidth + 2(n-1) × rtt/2

A ring runs at the pace of its slowest link, so the slowest measured pair is used.

The doctor's latest measurements are kept in `<data dir>/network-links.json` (newest per
pair), for the dashboard to show beside a run's communication share.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from dtgui.core.settings import atomic_write_text

TRANSFER_BYTES = 16 << 20  # each pair's transfer
TRANSFER_LIMIT = 3.0  # seconds at most: a slow link sends less
SLOW_LINK = 1e9 / 8  # bytes/s (1 Gbit/s): slower links warn
REFERENCE_PARAMS = 10_000_000  # the doctor's all-reduce example: 10 M float32 parameters
LINKS_FILE = "network-links.json"


@dataclass(frozen=True)
class LinkProbe:
    """What `source` measured towards `target` on `port` (error: why nothing was)."""

    source: str
    target: str
    port: int
    rtt_ms: float = 0.0
    bandwidth: float = 0.0  # bytes/s, timed by the target
    sent: int = 0
    received: int = 0
    error: str = ""
    measured_at: float = 0.0  # time.time()

    @property
    def ok(self) -> bool:
        return not self.error and self.bandwidth > 0

    def joins(self, a: str, b: str) -> bool:
        return {self.source, self.target} == {a, b}


def ring_allreduce_seconds(nbytes: float, participants: int, bandwidth: float,
                           rtt_ms: float = 0.0) -> float:
    """The ring all-reduce time of `nbytes` over `participants` (see the module doc); 0 for
    one participant."""
    n = participants
    if n < 2 or bandwidth <= 0:
        return 0.0
    return 2 * (n - 1) / n * nbytes / bandwidth + 2 * (n - 1) * rtt_ms / 2000


def slowest(links: Iterable[LinkProbe]) -> LinkProbe | None:
    measured = [link for link in links if link.ok]
    return min(measured, key=lambda link: link.bandwidth) if measured else None


def between(links: Iterable[LinkProbe], machines: Sequence[str]) -> list[LinkProbe]:
    """The newest measurement of each pair among `machines`."""
    wanted = set(machines)
    newest: dict[frozenset[str], LinkProbe] = {}
    for link in links:
        key = frozenset((link.source, link.target))
        if key <= wanted and len(key) == 2 and (
                key not in newest or link.measured_at >= newest[key].measured_at):
            newest[key] = link
    return list(newest.values())


def rate_text(bandwidth: float) -> str:
    bits = bandwidth * 8
    if bits >= 1e9:
        return f"{bits / 1e9:.2f} Gbit/s"
    return f"{bits / 1e6:.1f} Mbit/s"


def size_text(nbytes: float) -> str:
    return f"{nbytes / 2**20:.1f} MiB" if nbytes < 2**30 else f"{nbytes / 2**30:.2f} GiB"


def seconds_text(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def rtt_text(rtt_ms: float) -> str:
    return f"{rtt_ms:.2f} ms" if rtt_ms < 1 else f"{rtt_ms:.1f} ms"


def link_text(link: LinkProbe) -> str:
    """'94.1 Mbit/s, round trip 0.40 ms (16.0 MiB in 1.43 s)'."""
    took = link.received / link.bandwidth if link.bandwidth else 0.0
    return (f"{rate_text(link.bandwidth)}, round trip {rtt_text(link.rtt_ms)} "
            f"({size_text(link.received)} in {took:.2f} s)")


def allreduce_text(nbytes: float, participants: int, link: LinkProbe,
                   who: str = "workers") -> str:
    """'all-reduce of 12.0 MiB over 2 workers: about 214 ms at 94.1 Mbit/s'."""
    t = ring_allreduce_seconds(nbytes, participants, link.bandwidth, link.rtt_ms)
    return (f"all-reduce of {size_text(nbytes)} over {participants} {who}: about "
            f"{seconds_text(t)} at {rate_text(link.bandwidth)}")


# -- kept for the dashboard -----------------------------------------------------------------
def save_links(path: Path, links: Iterable[LinkProbe]) -> None:
    """Merge `links` into the file (newest per pair), written atomically."""
    kept = {frozenset((k.source, k.target)): k for k in load_links(path)}
    for link in links:
        kept[frozenset((link.source, link.target))] = link
    atomic_write_text(path, json.dumps([asdict(k) for k in kept.values()], indent=1))


def load_links(path: Path) -> list[LinkProbe]:
    """The kept measurements ([] when there is no readable file)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    names = {f.name for f in fields(LinkProbe)}
    out = []
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, dict):
            try:
                out.append(LinkProbe(**{k: v for k, v in item.items() if k in names}))
            except TypeError:
                continue
    return out


def age_text(link: LinkProbe, now: float | None = None) -> str:
    minutes = max(0.0, ((now if now is not None else time.time()) - link.measured_at) / 60)
    if minutes < 1:
        return "just now"
    if minutes < 120:
        return f"{minutes:.0f} min ago"
    return f"{minutes / 60:.0f} h ago" if minutes < 2880 else f"{minutes / 1440:.0f} days ago"
