"""CPU time over a benchmark's measured window: each started process tree's CPU seconds (psutil,
sampled every SAMPLE_SECONDS) and how busy the whole machine was, between two wall-clock times.

A step of processes that share a machine's cores is partly waiting for a core: the CPU seconds a
step takes (all the run's processes) and the machine's busy share tell a step bound by the cores
from one that waits on the network."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import psutil

SAMPLE_SECONDS = 0.2


@dataclass
class _Sample:
    at: float
    cpu: dict[int, float]  # pid -> CPU seconds (user + system)
    busy: float  # the machine's busy CPU seconds so far (all cores)
    total: float  # the machine's CPU seconds so far (all cores, idle included)


@dataclass
class CpuWindow:
    """Samples the process trees of `roots` (pids) until `stop()`."""

    roots: list[int]
    samples: list[_Sample] = field(default_factory=list)
    _done: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> CpuWindow:
        self._thread = threading.Thread(target=self._run, name="cpu-window", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while True:
            cpu: dict[int, float] = {}
            for root in self.roots:
                try:
                    tree = psutil.Process(root)
                    procs = [tree, *tree.children(recursive=True)]
                except psutil.Error:
                    continue
                for proc in procs:
                    try:
                        times = proc.cpu_times()
                    except psutil.Error:
                        continue
                    cpu[proc.pid] = times.user + times.system
            machine = psutil.cpu_times()
            idle = machine.idle + getattr(machine, "iowait", 0.0)
            total = sum(machine)
            self.samples.append(_Sample(time.time(), cpu, total - idle, total))
            if self._done.wait(SAMPLE_SECONDS):
                return

    def between(self, began: float, ended: float) -> tuple[float, float]:
        """(CPU seconds of the processes, the machine's busy share) from `began` to `ended`
        (wall-clock times; the nearest samples)."""
        if not self.samples:
            return 0.0, 0.0
        first = min(self.samples, key=lambda s: abs(s.at - began))
        last = min(self.samples, key=lambda s: abs(s.at - ended))
        used = sum(t - first.cpu.get(pid, 0.0) for pid, t in last.cpu.items())
        busy = (last.busy - first.busy) / max(1e-9, last.total - first.total)
        return used, busy
