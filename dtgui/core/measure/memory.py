"""Peak memory of each task's devices over a run, and the warning before out-of-memory (pure
Python).

`device` events (the worker's telemetry, every ~2 s) carry for each device `mem_used` and
`mem_total` in bytes: on a GPU what NVML reports for the whole GPU (TensorFlow's allocator
grows into it on demand and does not give it back, so the used figure is its high-water mark
plus what other processes hold); on the CPU the task's own resident memory (supervisor and
training process), with `mem_peak` (the kernel's high-water mark, VmHWM, of those processes)
and `mem_avail` (what the machine still has available, from which its memory in use follows).

`MemoryPeaks` keeps per task and device the peak, the latest and the limit; `RunCurves`
holds one (the run's one reducer). A device is near its limit when its fullest sample reached
`NEAR_LIMIT` of it: on a GPU the GPU's memory, on the CPU the machine's (what the kernel's
out-of-memory killer acts on), so the warning comes before the run fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

NEAR_LIMIT = 0.9


def non_negative(value: Any) -> float | None:
    """A sample's figure when it is a number of at least 0 (not a bool, not NaN), else None:
    events come from other programs and other versions."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
            and value >= 0:
        return float(value)
    return None


def _bytes(value: Any) -> int | None:
    number = non_negative(value)
    return None if number is None or number == float("inf") else int(number)


@dataclass(frozen=True)
class DeviceMemory:
    """One device of one task: its memory over the run, in bytes."""

    task: str
    device: str  # "gpu0", "cpu0"
    name: str  # "NVIDIA H100 80GB HBM3"
    kind: str  # "gpu" | "cpu"
    peak: int = 0  # the task's peak (GPU: the device's used memory at its fullest sample)
    used: int = 0  # the latest sample
    total: int = 0  # the device's memory (CPU: the machine's RAM)
    fullest: int = 0  # the most of `total` in use at any sample (CPU: by the whole machine)

    @property
    def fraction(self) -> float:
        """How close the device came to its limit (0..1; 0 when the limit is unknown)."""
        return self.fullest / self.total if self.total else 0.0

    @property
    def near_limit(self) -> bool:
        return self.fraction >= NEAR_LIMIT

    @property
    def label(self) -> str:
        return f"{self.task} {self.device}"


def gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.0f} MiB"


def memory_advice(d: DeviceMemory) -> str:
    """What to change for a device near its memory limit."""
    if d.kind == "gpu":
        return "a smaller per-replica batch, mixed precision or a GPU with more memory"
    return "a smaller batch or shuffle buffer, less cached in memory, or fewer tasks there"


def warning_text(d: DeviceMemory) -> str:
    """'worker:1 gpu1 at 93% of 79.65 GiB: out-of-memory is near; ...' with what to change."""
    what = "the machine's memory" if d.kind == "cpu" else gib(d.total)
    return f"{d.label} at {d.fraction:.0%} of {what}: out-of-memory is near; {memory_advice(d)}."


class MemoryPeaks:
    """Per task and device, the memory seen over the run (not thread-safe: inside RunCurves)."""

    def __init__(self) -> None:
        self._devices: dict[tuple[str, str], DeviceMemory] = {}

    def add(self, task: str, devices: Any) -> None:
        """A `device` event's `devices` list."""
        for dev in devices if isinstance(devices, list) else []:
            if isinstance(dev, Mapping):
                self._add(task, dev)

    def _add(self, task: str, dev: Mapping[str, Any]) -> None:
        used, total = _bytes(dev.get("mem_used")), _bytes(dev.get("mem_total")) or 0
        if used is None:
            return
        kind = str(dev.get("kind", "?"))
        key = (task, f"{kind}{dev.get('index', 0)}")
        peak = max(used, _bytes(dev.get("mem_peak")) or 0)
        avail = _bytes(dev.get("mem_avail"))
        in_use = total - avail if kind == "cpu" and avail is not None and total else used
        old = self._devices.get(key)
        if old is None:
            old = DeviceMemory(task, key[1], str(dev.get("name", "")), kind)
        self._devices[key] = replace(old, peak=max(old.peak, peak), used=used,
                                     total=total or old.total,
                                     fullest=max(old.fullest, in_use))

    def devices(self) -> list[DeviceMemory]:
        """Every task's devices, in the order they first reported."""
        return list(self._devices.values())

    def near_limit(self) -> list[DeviceMemory]:
        return [d for d in self._devices.values() if d.near_limit]

    def copy(self) -> MemoryPeaks:
        out = MemoryPeaks()
        out._devices = dict(self._devices)
        return out
