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

A ring runs at the pace of its slowest link, so the slowest measured link is used; each pair
is measured both ways (a ring sends both ways round), and a direction under half the other's
rate is called out with what usually causes it.

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
ASYMMETRY = 0.5  # one direction under half the other's rate: called out ...
ASYMMETRY_TIMED_SECONDS = 0.1  # ... when its transfer took this long at least
REFERENCE_PARAMS = 10_000_000  # the doctor's all-reduce example: 10 M float32 parameters
LINKS_FILE = "network-links.json"


@dataclass(frozen=True)
class LinkTest:
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


def slowest(links: Iterable[LinkTest]) -> LinkTest | None:
    measured = [link for link in links if link.ok]
    return min(measured, key=lambda link: link.bandwidth) if measured else None


def between(links: Iterable[LinkTest], machines: Sequence[str]) -> list[LinkTest]:
    """The newest measurement of each direction of each pair among `machines`."""
    wanted = set(machines)
    newest: dict[tuple[str, str], LinkTest] = {}
    for link in links:
        key = (link.source, link.target)
        if {link.source, link.target} <= wanted and link.source != link.target and (
                key not in newest or link.measured_at >= newest[key].measured_at):
            newest[key] = link
    return list(newest.values())


def directions(links: Iterable[LinkTest]) -> list[tuple[LinkTest, LinkTest | None]]:
    """The measured links by pair: (one direction, the other or None when only one was
    measured), in the order the pairs first appear."""
    found: dict[frozenset[str], list[LinkTest]] = {}
    for link in links:
        if link.ok:
            found.setdefault(frozenset((link.source, link.target)), []).append(link)
    return [(pair[0], pair[1] if len(pair) > 1 else None) for pair in found.values()]


def asymmetric(forward: LinkTest, backward: LinkTest | None) -> LinkTest | None:
    """The slower direction of a pair when it runs at under ASYMMETRY of the other, and its
    transfer took long enough to be timed (a fast link moves the doctor's transfer in a few
    milliseconds, where the two ways differ by the machines' load, not the link)."""
    if backward is None or not (forward.ok and backward.ok):
        return None
    slow, fast = sorted((forward, backward), key=lambda link: link.bandwidth)
    timed = slow.received / slow.bandwidth >= ASYMMETRY_TIMED_SECONDS
    return slow if timed and slow.bandwidth < ASYMMETRY * fast.bandwidth else None


def pair_text(forward: LinkTest, backward: LinkTest | None) -> str:
    """'a ↔ b 382 Mbit/s → / 941 Mbit/s ←, 0.42 ms round trip' (one way: 'a → b ...')."""
    if backward is None:
        return (f"{forward.source} → {forward.target} {rate_text(forward.bandwidth)}, "
                f"{rtt_text(forward.rtt_ms)} round trip")
    rtt = min(forward.rtt_ms, backward.rtt_ms)
    return (f"{forward.source} ↔ {forward.target} {rate_text(forward.bandwidth)} → / "
            f"{rate_text(backward.bandwidth)} ←, {rtt_text(rtt)} round trip")


def asymmetry_text(slow: LinkTest, fast: LinkTest) -> str:
    """Why one direction of a link can be much slower than the other, and what to check."""
    return (f"{slow.source} → {slow.target} runs at {rate_text(slow.bandwidth)}, "
            f"{fast.bandwidth / slow.bandwidth:.1f}× slower than {fast.source} → "
            f"{fast.target} ({rate_text(fast.bandwidth)}): a shaped or saturated uplink on "
            f"{slow.source}, traffic shaping, or a duplex mismatch; check what else sends "
            f"from {slow.source} and its interface settings (ethtool). A ring all-reduce "
            f"goes at the slower direction's pace.")


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


def link_text(link: LinkTest) -> str:
    """'94.1 Mbit/s, round trip 0.40 ms (16.0 MiB in 1.43 s)'."""
    took = link.received / link.bandwidth if link.bandwidth else 0.0
    return (f"{rate_text(link.bandwidth)}, round trip {rtt_text(link.rtt_ms)} "
            f"({size_text(link.received)} in {took:.2f} s)")


def allreduce_text(nbytes: float, participants: int, link: LinkTest,
                   who: str = "workers") -> str:
    """'all-reduce of 12.0 MiB over 2 workers: about 214 ms at 94.1 Mbit/s'."""
    t = ring_allreduce_seconds(nbytes, participants, link.bandwidth, link.rtt_ms)
    return (f"all-reduce of {size_text(nbytes)} over {participants} {who}: about "
            f"{seconds_text(t)} at {rate_text(link.bandwidth)}")


# -- kept for the dashboard -----------------------------------------------------------------
def save_links(path: Path, links: Iterable[LinkTest]) -> None:
    """Merge `links` into the file (newest per direction of each pair), written atomically."""
    kept = {(k.source, k.target): k for k in load_links(path)}
    for link in links:
        kept[(link.source, link.target)] = link
    atomic_write_text(path, json.dumps([asdict(k) for k in kept.values()], indent=1))


def load_links(path: Path) -> list[LinkTest]:
    """The kept measurements ([] when there is no readable file)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    names = {f.name for f in fields(LinkTest)}
    out = []
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, dict):
            try:
                out.append(LinkTest(**{k: v for k, v in item.items() if k in names}))
            except TypeError:
                continue
    return out


def age_text(link: LinkTest, now: float | None = None) -> str:
    minutes = max(0.0, ((now if now is not None else time.time()) - link.measured_at) / 60)
    if minutes < 1:
        return "just now"
    if minutes < 120:
        return f"{minutes:.0f} min ago"
    return f"{minutes / 60:.0f} h ago" if minutes < 2880 else f"{minutes / 1440:.0f} days ago"
