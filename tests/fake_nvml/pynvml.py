"""A stand-in for nvidia-ml-py's `pynvml` that replays GPU telemetry captured on a real
machine (tests/fixtures/gpu/telemetry-h100-under-load.jsonl, one line a sample): the worker's
telemetry path (`dtgui.worker.telemetry`) and the machine probe (`nvml_gpus`) run unchanged
where there is no GPU. Put this directory first on PYTHONPATH to use it.

With DTGUI_FAKE_NVML_LOADED_WHILE=PATH in the environment, the GPU is under that load (and
runs a compute process) only while the file PATH exists; otherwise it is the same H100 idle,
as nvidia-smi reported it (tests/fixtures/gpu/nvidia-smi-query-h100.csv): another process
taking the GPU and leaving it, as a test makes it."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gpu"
CAPTURE = FIXTURES / "telemetry-h100-under-load.jsonl"
_SAMPLES = [json.loads(line)["devices"] for line in CAPTURE.read_text().splitlines()
            if line.strip()]
_next = itertools.cycle(range(len(_SAMPLES)))
_current: list[dict[str, Any]] = _SAMPLES[0]
# name, memory.total [MiB], memory.used [MiB], utilization.gpu [%], driver_version
_IDLE = [v.strip() for v in (FIXTURES / "nvidia-smi-query-h100.csv").read_text().split(",")]


class NVMLError(Exception):
    pass


def _loaded() -> bool:
    path = os.environ.get("DTGUI_FAKE_NVML_LOADED_WHILE")
    return not path or os.path.exists(path)


def nvmlInit() -> None:
    pass


def nvmlShutdown() -> None:
    pass


def nvmlSystemGetDriverVersion() -> str:
    return _IDLE[4]


def nvmlDeviceGetCount() -> int:
    return len(_SAMPLES[0])


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    return index


def nvmlDeviceGetUUID(handle: int) -> str:
    return f"GPU-fake-{handle}"


def nvmlDeviceGetName(handle: int) -> str:
    global _current
    if handle == 0:  # the first device of each sample moves the replay on
        _current = _SAMPLES[next(_next)]
    return str(_current[handle]["name"])


def nvmlDeviceGetUtilizationRates(handle: int) -> SimpleNamespace:
    return SimpleNamespace(gpu=_current[handle]["util"] if _loaded() else float(_IDLE[3]),
                           memory=0)


def nvmlDeviceGetMemoryInfo(handle: int) -> SimpleNamespace:
    dev = _current[handle]
    used = dev["mem_used"] if _loaded() else int(_IDLE[2]) << 20
    return SimpleNamespace(used=used, total=dev["mem_total"], free=dev["mem_total"] - used)


def nvmlDeviceGetCudaComputeCapability(handle: int) -> tuple[int, int]:
    return 9, 0  # what NVML reported for that GPU


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list[SimpleNamespace]:
    return [SimpleNamespace(pid=4242, usedGpuMemory=_current[handle]["mem_used"])] \
        if _loaded() and os.environ.get("DTGUI_FAKE_NVML_LOADED_WHILE") else []
