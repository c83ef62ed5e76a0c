"""Background device telemetry: ``device`` events every ~2 s (NVML GPUs, else the CPU), with
the machine's network traffic since the last sample (`net`: bytes/s received and sent over
its interfaces but loopback; absent at the first sample).

Memory in bytes: a GPU's used and total memory as NVML reports them; on the CPU the task's
resident memory (this supervisor and its training process), its high-water mark (`mem_peak`,
the kernel's VmHWM, so a peak between two samples is not missed) and what the machine still
has available (`mem_avail`): `dtgui.core.measure.memory` keeps the peaks and warns near the limit.
CPU use in % of all the machine's cores since the last sample: the machine's (`util`) and the
task's own processes' (`task_util`), with the machine's name (`host`): `dtgui.core.run_curves`
tells other processes' share from them (the run's tasks on one machine are not others). Samples come while the training process runs (`alive`): one taken after it ended
would describe this supervisor alone."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil

from .events import EventWriter
from .machine_probe import cpu_model_name, nvml_text

MIN_CPU_SECONDS = 0.2  # a share of the CPU is measured over at least this long


def peak_rss(pid: int) -> int:
    """The process's resident-memory high-water mark in bytes (Linux; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class _Nvml:
    """Thin guarded wrapper over pynvml (nvidia-ml-py); ``ok`` is False without a driver."""

    def __init__(self) -> None:
        self.ok = False
        self._nv: Any = None
        self._handles: list[tuple[int, Any]] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nv = pynvml
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                       for i in range(pynvml.nvmlDeviceGetCount())]
            uuids = [nvml_text(pynvml.nvmlDeviceGetUUID(h)) for h in handles]
            for i in self._visible_indices(uuids):
                self._handles.append((i, handles[i]))
            self.ok = bool(self._handles)
        except Exception:  # noqa: BLE001 - no library, no driver, no GPU: fall back to the CPU
            self.ok = False

    @staticmethod
    def _visible_indices(uuids: list[str]) -> list[int]:
        """NVML indices of the GPUs CUDA_VISIBLE_DEVICES lets this task use."""
        env = os.environ.get("CUDA_VISIBLE_DEVICES")
        if env is None:
            return list(range(len(uuids)))
        out: list[int] = []
        for part in (p.strip() for p in env.split(",")):
            if part.isdigit() and int(part) < len(uuids):
                out.append(int(part))
            elif part.startswith(("GPU-", "MIG-")):
                out.extend(i for i, u in enumerate(uuids) if u.startswith(part))
            else:
                break  # CUDA stops at the first invalid entry
        return out

    def sample(self) -> list[dict[str, Any]]:
        nv = self._nv
        devices: list[dict[str, Any]] = []
        for index, handle in self._handles:
            name = nvml_text(nv.nvmlDeviceGetName(handle))
            util = nv.nvmlDeviceGetUtilizationRates(handle)
            mem = nv.nvmlDeviceGetMemoryInfo(handle)
            devices.append({"kind": "gpu", "index": index, "name": str(name),
                            "util": float(util.gpu), "mem_used": int(mem.used),
                            "mem_total": int(mem.total)})
        return devices

    def shutdown(self) -> None:
        if self.ok:
            with contextlib.suppress(Exception):
                self._nv.nvmlShutdown()


class NetworkTraffic:
    """The machine's bytes received and sent per second between two calls, over its network
    interfaces but loopback (a task's own traffic cannot be told apart without privileges;
    the machine's is what a link carries)."""

    def __init__(self) -> None:
        self._last: tuple[float, int, int] | None = None

    @staticmethod
    def totals() -> tuple[int, int]:
        """Bytes received and sent so far by the machine's interfaces but loopback."""
        rx = tx = 0
        for name, counters in psutil.net_io_counters(pernic=True).items():
            if name != "lo" and not name.startswith("lo:"):
                rx += counters.bytes_recv
                tx += counters.bytes_sent
        return rx, tx

    def rates(self) -> dict[str, float]:
        """{"rx": bytes/s, "tx": bytes/s} since the last call ({} at the first, or when the
        counters went back: an interface went away)."""
        now = time.monotonic()
        rx, tx = self.totals()
        last, self._last = self._last, (now, rx, tx)
        if last is None or now <= last[0] or rx < last[1] or tx < last[2]:
            return {}
        seconds = now - last[0]
        return {"rx": round((rx - last[1]) / seconds, 1), "tx": round((tx - last[2]) / seconds, 1)}


class Telemetry:
    """Emits a ``device`` event at start and every ``interval`` seconds until ``stop()``."""

    def __init__(self, events: EventWriter, interval: float = 2.0,
                 alive: Callable[[], bool] = lambda: True) -> None:
        self._events = events
        self._interval = interval
        self._alive = alive
        self._cpu_times: dict[int, float] = {}  # pid -> its CPU seconds at the last sample
        self._cpu_at = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: _Nvml | None = None
        self._proc = psutil.Process()
        self._cpu_name = cpu_model_name()
        self._host = socket.gethostname()
        self._traffic = NetworkTraffic()

    def start(self) -> Telemetry:
        self._nvml = _Nvml()
        psutil.cpu_percent(interval=None)  # prime the system-wide counter
        with contextlib.suppress(Exception):
            self._cpu_entry()  # and the task's own (the first sample covers the same time)
        self._thread = threading.Thread(target=self._run, name="dtgui-telemetry", daemon=True)
        self._thread.start()
        return self

    def _cpu_entry(self) -> dict[str, Any]:
        rss = peak = 0
        times: dict[int, float] = {}
        try:
            procs = [self._proc, *self._proc.children(recursive=True)]
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    rss += p.memory_info().rss
                    peak += peak_rss(p.pid)
                    cpu = p.cpu_times()
                    times[p.pid] = cpu.user + cpu.system
        except psutil.Error:
            pass
        now = time.monotonic()
        used = sum(t - self._cpu_times.get(pid, 0.0) for pid, t in times.items())
        seconds = now - self._cpu_at
        self._cpu_times, self._cpu_at = times, now
        own = {}
        if seconds >= MIN_CPU_SECONDS:  # shorter (the sample at start): no measure of a share
            share = 100 * used / (seconds * (psutil.cpu_count() or 1))
            own["task_util"] = round(min(100.0, max(0.0, share)), 1)
        memory = psutil.virtual_memory()
        return {"kind": "cpu", "index": 0, "name": self._cpu_name, "host": self._host,
                "util": float(psutil.cpu_percent(interval=None)), **own,
                "mem_used": int(rss), "mem_peak": int(max(peak, rss)),
                "mem_total": int(memory.total), "mem_avail": int(memory.available)}

    def sample(self) -> list[dict[str, Any]]:
        if self._nvml is not None and self._nvml.ok:
            try:
                return self._nvml.sample()
            except Exception:  # noqa: BLE001 - telemetry never ends a task: the CPU entry instead
                pass
        return [self._cpu_entry()]

    def _run(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # telemetry must never break training
                traffic = self._traffic.rates()
                devices = self.sample()
                if self._alive():
                    self._events.emit("device", devices=devices,
                                      **({"net": traffic} if traffic else {}))
            if self._stop.wait(self._interval):
                break

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._nvml is not None:
            self._nvml.shutdown()
            self._nvml = None
