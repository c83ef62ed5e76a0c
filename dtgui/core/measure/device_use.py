"""What a run's devices and network did, measured without the training code's help (pure
Python): how busy each task's devices were and how often idle, and each machine's network
traffic, set against the link the cluster doctor measured.

`device` events (the worker's telemetry, every ~2 s, for dtgui's loop and a user's own
script alike) carry each device's utilisation (`util`, %: a GPU's from NVML, else the
machine's CPU) and, optional, the machine's network traffic since the last sample (`net`:
``{"rx": bytes/s, "tx": bytes/s}`` over its interfaces but loopback). `DeviceUse` keeps, per
task and device, the samples taken while the task trained (from its `started` event, or
for a user's script, which starts before it trains, from its first number, line of progress
or `report()`; until it finished or failed) and, per task, the traffic; `RunCurves` holds one (the run's one
reducer). Tasks on one machine report the same traffic: `traffic(machines)` counts each
machine once.

A device under `IDLE_UTIL` % is idle: gaps in a GPU's use mean it waits (for input, for the
other workers, for the host), though not for which; the split (`dtgui.core.measure.bottleneck`)
says which, with dtgui's loop or a script's `report()`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dtgui.core.measure.memory import non_negative
from dtgui.core.measure.network_pairs import LinkTest, rate_text

IDLE_UTIL = 10.0  # % utilisation under which a sample counts as idle
BUSY_LINK = 0.7  # traffic at this share of the measured link: the link is the limit
MIN_SAMPLES = 3  # samples before a device's idle share is told


@dataclass(frozen=True)
class DeviceBusy:
    """One device of one task while it trained: its utilisation samples."""

    task: str
    device: str  # "gpu0", "cpu0"
    kind: str  # "gpu" | "cpu"
    samples: int = 0
    util_sum: float = 0.0
    idle: int = 0  # samples under IDLE_UTIL

    @property
    def mean_util(self) -> float:
        return self.util_sum / self.samples if self.samples else 0.0

    @property
    def idle_share(self) -> float:
        return self.idle / self.samples if self.samples else 0.0

    @property
    def label(self) -> str:
        return f"{self.task} {self.device}"

    @property
    def text(self) -> str:
        """'71 % busy, idle 22 % of the time' ('' before MIN_SAMPLES samples)."""
        if self.samples < MIN_SAMPLES:
            return ""
        return f"{self.mean_util:.0f} % busy, idle {self.idle_share * 100:.0f} % of the time"


@dataclass(frozen=True)
class Traffic:
    """A machine's network traffic over the run, bytes/s (the latest sample and the peak)."""

    machine: str
    rx: float = 0.0
    tx: float = 0.0
    peak_rx: float = 0.0
    peak_tx: float = 0.0

    @property
    def text(self) -> str:
        """'h2 in 42.0 Mbit/s (peak 371.0 Mbit/s), out 40.1 Mbit/s (peak 380.2 Mbit/s)'."""
        return (f"{self.machine} in {rate_text(self.rx)} (peak {rate_text(self.peak_rx)}), "
                f"out {rate_text(self.tx)} (peak {rate_text(self.peak_tx)})")


class DeviceUse:
    """Per task and device, utilisation while training; per task, its machine's traffic
    (not thread-safe: inside RunCurves)."""

    def __init__(self) -> None:
        self._busy: dict[tuple[str, str], DeviceBusy] = {}
        self._traffic: dict[str, Traffic] = {}  # by task
        self._training: set[str] = set()

    def started(self, task: str) -> None:
        self._training.add(task)

    def finished(self, task: str) -> None:
        self._training.discard(task)

    def add(self, task: str, devices: Any, net: Any = None) -> None:
        """A `device` event of `task`: its `devices` list and `net` traffic."""
        if isinstance(net, Mapping):
            rx, tx = non_negative(net.get("rx")), non_negative(net.get("tx"))
            if rx is not None and tx is not None:
                old = self._traffic.get(task, Traffic(task))
                self._traffic[task] = replace(old, rx=rx, tx=tx, peak_rx=max(old.peak_rx, rx),
                                              peak_tx=max(old.peak_tx, tx))
        if task not in self._training:
            return  # building, importing, saving: not the device's use in training
        for dev in devices if isinstance(devices, list) else []:
            util = non_negative(dev.get("util")) if isinstance(dev, Mapping) else None
            if util is None:
                continue
            kind = str(dev.get("kind", "?"))
            key = (task, f"{kind}{dev.get('index', 0)}")
            busy = self._busy.get(key) or DeviceBusy(task, key[1], kind)
            self._busy[key] = replace(busy, samples=busy.samples + 1,
                                      util_sum=busy.util_sum + util,
                                      idle=busy.idle + (util < IDLE_UTIL))

    def devices(self) -> list[DeviceBusy]:
        """Every task's devices, in the order they first reported while training."""
        return list(self._busy.values())

    def traffic(self, machines: Mapping[str, str] | None = None) -> list[Traffic]:
        """Each machine's traffic once (`machines`: task -> machine; a task without one is
        on "this machine"); the first task of a machine by name speaks for it."""
        seen: dict[str, Traffic] = {}
        for task in sorted(self._traffic):
            machine = (machines or {}).get(task) or "this machine"
            if machine not in seen:
                seen[machine] = replace(self._traffic[task], machine=machine)
        return list(seen.values())

    def copy(self) -> DeviceUse:
        out = DeviceUse()
        out._busy = dict(self._busy)
        out._traffic = dict(self._traffic)
        out._training = set(self._training)
        return out


def link_share(traffic: Traffic, links: Iterable[LinkTest]) -> tuple[float, LinkTest] | None:
    """The share of its slowest measured outgoing link that the machine's peak sending
    reached, with that link (None when the doctor measured none from it)."""
    outgoing = [k for k in links if k.ok and k.source == traffic.machine]
    if not outgoing:
        return None
    link = min(outgoing, key=lambda k: k.bandwidth)
    return traffic.peak_tx / link.bandwidth, link


def traffic_text(traffic: Sequence[Traffic], links: Iterable[LinkTest] = ()) -> str:
    """The card's traffic line: each machine's traffic, and the share of its measured link
    it reached when the doctor measured one ('' before any sample)."""
    if not traffic:
        return ""
    links = list(links)
    parts = []
    for t in traffic:
        part = t.text
        found = link_share(t, links)
        if found is not None:
            share, link = found
            part += (f": {share * 100:.0f} % of the {rate_text(link.bandwidth)} "
                     f"{link.source} → {link.target} link")
        parts.append(part)
    return "Traffic: " + "; ".join(parts) + "."


def traffic_line(traffic: Sequence[Traffic], links: Iterable[LinkTest] = ()) -> str:
    """The card's short traffic line: each machine's peak sending, and the share of its
    measured link ('Sent at peak: h2 337.7 Mbit/s (88 % of its link); h3 …'); the full
    figures are `traffic_text`'s."""
    if not traffic:
        return ""
    links = list(links)
    parts = []
    for t in traffic:
        found = link_share(t, links)
        parts.append(f"{t.machine} {rate_text(t.peak_tx)}"
                     + (f" ({found[0] * 100:.0f} % of its link)" if found is not None else ""))
    return "Sent at peak: " + "; ".join(parts)


def unhelped_summary(devices: Sequence[DeviceBusy], traffic: Sequence[Traffic],
                     links: Iterable[LinkTest] = ()) -> str:
    """What the samples say of a run that gives no split (a script without `report()`):
    the idlest device, and a machine whose sending filled most of its measured link ('' when
    there is nothing to say yet)."""
    said = []
    told = [d for d in devices if d.samples >= MIN_SAMPLES]
    gpus = [d for d in told if d.kind == "gpu"] or told
    if gpus:
        idlest = max(gpus, key=lambda d: (d.idle_share, -d.mean_util, d.label))
        said.append(f"{idlest.label} {idlest.text}"
                    + (" — it waits (for input, the other workers or the host)"
                       if idlest.kind == "gpu" and idlest.idle_share >= 0.2 else ""))
    links = list(links)
    busiest = max(((found[0], t, found[1]) for t in traffic
                   if (found := link_share(t, links)) is not None),
                  key=lambda f: f[0], default=None)
    if busiest is not None and busiest[0] >= BUSY_LINK:
        share, t, link = busiest
        said.append(f"{t.machine} sent at up to {share * 100:.0f} % of its "
                    f"{rate_text(link.bandwidth)} link to {link.target}: the network is "
                    "likely the limit")
    return "Measured without its help: " + "; ".join(said) + "." if said else ""
