"""What a run's `device` events say, folded once: the one place a device sample goes.

A sample (the worker's telemetry, every ~2 s) feeds, in one call (`RunDevices.add`):
each device's utilisation and memory series for the dashboard's plots, each task's peak
memory (`MemoryPeaks`), each device's use while training and the machines' traffic
(`DeviceUse`), and each task's machine's CPU load (`cpu_loads`, for the bottleneck verdict).
`RunCurves` holds one (the run's one reducer). Where no sample came for GAP_SECONDS (a
machine that did not answer), or a task started again (a run stopped and resumed, however
soon), the series hold a NaN point: the plots leave a gap there rather than draw a line
across the time nothing was measured.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from dtgui.core.events import Event
from dtgui.core.measure.bottleneck import WINDOW_SAMPLES, CpuLoad, cpu_load
from dtgui.core.measure.device_use import DeviceUse
from dtgui.core.measure.memory import MemoryPeaks
from dtgui.core.series import Series, series_of

GAP_SECONDS = 15.0  # no sample for this long (they come every ~2 s): a gap in the series


def _sample(series: Series, seconds: float, value: float, gap: bool = False) -> None:
    """A sample appended, after a NaN point (a gap) when none came for GAP_SECONDS or
    (`gap`) its task started again since the last one."""
    last = series.last_x
    if last is not None and (gap or seconds - last > GAP_SECONDS) and seconds > last:
        series.append((last + seconds) / 2, math.nan)
    series.append(seconds, value)


class RunDevices:
    """Not thread-safe: `LiveRun` holds one (in its `RunCurves`) under its lock."""

    def __init__(self) -> None:
        self.util: dict[str, Series] = {}  # label -> (seconds, utilisation %)
        self.mem: dict[str, Series] = {}  # label -> (seconds, MiB used)
        self.memory = MemoryPeaks()  # each task's peak memory
        self.use = DeviceUse()  # utilisation while training, traffic
        self._owner: dict[str, str] = {}  # "machine device" -> the task reporting it
        self._cpu_mem: dict[str, dict[str, float]] = {}  # machine -> task -> its memory
        # task -> its machine's CPU, (busy %, the task's own %), its last WINDOW_SAMPLES samples
        self._cpu: dict[str, deque[tuple[float, float]]] = {}
        self._cpu_host: dict[str, str] = {}  # task -> the name of its machine
        self._started: set[str] = set()  # tasks that have started
        self._restarted: set[str] = set()  # tasks started again since their last sample

    def task_started(self, task: str) -> None:
        """`task` started; started again (a resume, a restart), its next sample follows a
        gap."""
        if task in self._started:
            self._restarted.add(task)
        self._started.add(task)

    def add(self, event: Event, elapsed: float, machine: str,
            ended: Callable[[str], bool]) -> None:
        """A `device` event of a task on `machine` ("" = this machine), `elapsed` seconds
        into the run; `ended(task)`: that task has finished, failed or stopped."""
        devices, task = event.get("devices"), event.task
        self._add_cpu(task, devices)
        self.memory.add(task, devices)
        self.use.add(task, devices, event.get("net"))
        self._add_series(task, devices, elapsed, machine, ended)

    def _add_series(self, task: str, devices: object, elapsed: float, machine: str,
                    ended: Callable[[str], bool]) -> None:
        """On one machine, a series per task and device ("worker:0 cpu0"). In a
        multi-machine run, a series per machine and device ("h2 cpu0"): tasks sharing a
        machine see the same devices (NVML and the CPU load are machine-wide), so the first
        task reporting a device speaks for it until it ends; for the CPU, memory is the sum
        of the tasks' own memory on that machine."""
        for dev in devices if isinstance(devices, list) else []:
            if not isinstance(dev, dict):
                continue
            name = f"{dev.get('kind', '?')}{dev.get('index', 0)}"
            used = dev.get("mem_used")
            util = dev.get("util")
            if not machine:
                label = f"{task} {name}"
            else:
                label = f"{machine} {name}"
                if dev.get("kind") == "cpu" and isinstance(used, (int, float)):
                    rss = self._cpu_mem.setdefault(machine, {})
                    rss[task] = float(used)
                    used = sum(rss.values())
                owner = self._owner.get(label)
                if owner is not None and owner != task and not ended(owner):
                    continue
                self._owner[label] = task
            gap = task in self._restarted
            if isinstance(util, (int, float)):
                _sample(series_of(self.util, label), elapsed, float(util), gap)
            if isinstance(used, (int, float)):
                _sample(series_of(self.mem, label), elapsed, used / 2**20, gap)
        self._restarted.discard(task)

    def _add_cpu(self, task: str, devices: object) -> None:
        """A sample's CPU entry: the machine's busy % and the task's own % (a sample without
        the task's own share, from an older worker, is not a load)."""
        for dev in devices if isinstance(devices, list) else []:
            if not isinstance(dev, dict) or dev.get("kind") != "cpu":
                continue
            busy, own = dev.get("util"), dev.get("task_util")
            if isinstance(busy, (int, float)) and isinstance(own, (int, float)):
                self._cpu.setdefault(task, deque(maxlen=WINDOW_SAMPLES)).append(
                    (float(busy), float(own)))
                self._cpu_host[task] = str(dev.get("host") or "")

    def cpu_loads(self) -> list[CpuLoad]:
        """Each task's machine's CPU load over its last samples (bottleneck.CpuLoad); the
        run's own use of a machine is that of all its tasks there (one named host)."""
        found = [cpu_load(task, list(samples)) for task, samples in self._cpu.items()]
        loads = [load for load in found if load is not None]
        run_own: dict[str, float] = {}
        for load in loads:
            host = self._cpu_host.get(load.task, "")
            if host:
                run_own[host] = run_own.get(host, 0.0) + load.own
        return [CpuLoad(load.task, load.busy,
                        min(1.0, run_own.get(self._cpu_host.get(load.task, ""), load.own)))
                for load in loads]
