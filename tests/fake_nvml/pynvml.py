"""A stand-in for nvidia-ml-py's `pynvml` that replays GPU telemetry captured on a real
machine (tests/fixtures/gpu/telemetry-h100-under-load.jsonl, one line a sample): the worker's
telemetry path (`dtgui.worker.telemetry`) runs unchanged where there is no GPU. Put this
directory first on PYTHONPATH to use it."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

CAPTURE = Path(__file__).resolve().parent.parent / "fixtures" / "gpu" / \
    "telemetry-h100-under-load.jsonl"
_SAMPLES = [json.loads(line)["devices"] for line in CAPTURE.read_text().splitlines()
            if line.strip()]
_next = itertools.cycle(range(len(_SAMPLES)))
_current: list[dict[str, Any]] = _SAMPLES[0]


def nvmlInit() -> None:
    pass


def nvmlShutdown() -> None:
    pass


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
    return SimpleNamespace(gpu=_current[handle]["util"], memory=0)


def nvmlDeviceGetMemoryInfo(handle: int) -> SimpleNamespace:
    dev = _current[handle]
    return SimpleNamespace(used=dev["mem_used"], total=dev["mem_total"],
                           free=dev["mem_total"] - dev["mem_used"])
