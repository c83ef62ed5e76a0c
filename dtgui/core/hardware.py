"""What this machine has (CPU, RAM, GPUs through NVML) and what TensorFlow can use of it.

Detection reads /proc and NVML only; it never imports TensorFlow. What TensorFlow sees comes
from `python -m dtgui.worker.tf_probe` run in a subprocess, parsed by `parse_tf_probe`.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shlex
import socket
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    mem_total: int
    mem_used: int
    util: float
    driver: str = ""
    compute_capability: str = ""


@dataclass(frozen=True)
class TfView:
    """What TensorFlow reported from a subprocess."""

    version: str = ""
    gpus: tuple[str, ...] = ()
    built_with_cuda: bool = False
    cuda_version: str = ""
    cudnn_version: str = ""
    error: str = ""


@dataclass
class MachineFacts:
    hostname: str
    os_name: str
    python: str
    cpu_model: str
    cpu_cores: int
    ram_total: int
    gpus: list[GpuInfo] = field(default_factory=list)
    nvml_error: str = ""
    tf: TfView | None = None

    @property
    def tf_gpu_count(self) -> int:
        return len(self.tf.gpus) if self.tf else 0

    @property
    def usable_gpu_count(self) -> int:
        return self.tf_gpu_count

    def explanation(self) -> str:
        """A plain explanation of what TensorFlow can use, and what to do when it differs."""
        return explain(self)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "processor\t: arm")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_total() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def read_nvml_gpus() -> tuple[list[GpuInfo], str]:
    """GPUs as the NVIDIA driver sees them; an explanation instead when NVML is unavailable."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return [], "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return [], f"no NVIDIA driver answered ({exc})"
    gpus: list[GpuInfo] = []
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            try:
                util = float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            except pynvml.NVMLError:  # NotSupported on some boards
                util = 0.0
            try:
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
                cc = f"{major}.{minor}"
            except pynvml.NVMLError:
                cc = ""
            gpus.append(
                GpuInfo(
                    index=i,
                    name=_text(pynvml.nvmlDeviceGetName(handle)),
                    mem_total=int(mem.total),
                    mem_used=int(mem.used),
                    util=util,
                    driver=driver,
                    compute_capability=cc,
                )
            )
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return gpus, ""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def detect_local() -> MachineFacts:
    """Everything but the TensorFlow view. Reads files and NVML: call it off the UI thread."""
    gpus, nvml_error = read_nvml_gpus()
    return MachineFacts(
        hostname=socket.gethostname(),
        os_name=f"{platform.system()} {platform.release()}",
        python=platform.python_version(),
        cpu_model=_cpu_model(),
        cpu_cores=os.cpu_count() or 1,
        ram_total=_ram_total(),
        gpus=gpus,
        nvml_error=nvml_error,
    )


def parse_tf_probe(output: str) -> TfView:
    """Parse the JSON printed by `python -m dtgui.worker.tf_probe`."""
    try:
        data = json.loads(output.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        tail = output.strip()[-300:] or "no output"
        return TfView(error=f"the TensorFlow probe printed no result: {tail}")
    devices = data.get("physical_devices") or []
    gpus = tuple(
        str(d.get("name", "GPU")) for d in devices if str(d.get("device_type", "")).upper() == "GPU"
    )
    return TfView(
        version=str(data.get("tensorflow") or ""),
        gpus=gpus,
        built_with_cuda=bool(data.get("built_with_cuda")),
        cuda_version=str(data.get("cuda_version") or ""),
        cudnn_version=str(data.get("cudnn_version") or ""),
        error=str(data.get("error") or ""),
    )


def tf_install_command(version: str = "", gpus: bool = False) -> str:
    """The pip command that installs TensorFlow; with GPUs its CUDA build, whose wheels bring
    the CUDA and cuDNN libraries (plain `tensorflow` on Linux cannot open a GPU)."""
    pin = f"=={version}" if version else ""
    return "pip install " + shlex.quote(f"tensorflow[and-cuda]{pin}" if gpus else f"tensorflow{pin}")


def explain(facts: MachineFacts) -> str:
    tf = facts.tf
    driver_gpus = len(facts.gpus)
    if tf is None:
        return "Asking TensorFlow what it can use…"
    if tf.error and not tf.version:
        if driver_gpus:
            return (
                f"TensorFlow could not be loaded: {tf.error}. The NVIDIA driver sees "
                f"{driver_gpus} GPU(s): install TensorFlow's CUDA build to train on them "
                f"({tf_install_command(gpus=True)})."
            )
        return (
            f"TensorFlow could not be loaded: {tf.error}. Install it in this environment "
            f"({tf_install_command()}) to train here."
        )
    tf_gpus = len(tf.gpus)
    if driver_gpus == 0 and tf_gpus == 0:
        return (
            "No GPU found. dtgui trains on the CPU and can split it into several logical "
            "devices, so Mirrored and CentralStorage still run several replicas side by side."
        )
    if driver_gpus > 0 and tf_gpus == 0:
        if not tf.built_with_cuda:
            return (
                f"The NVIDIA driver sees {driver_gpus} GPU(s), but this TensorFlow "
                f"{tf.version} was built without CUDA. Install the GPU build: "
                f"{tf_install_command(tf.version, gpus=True)} (Linux), then press Refresh."
            )
        return (
            f"The NVIDIA driver sees {driver_gpus} GPU(s), but TensorFlow {tf.version} "
            f"(built for CUDA {tf.cuda_version or '?'}, cuDNN {tf.cudnn_version or '?'}) "
            "cannot open them. Usually the CUDA/cuDNN libraries are missing or the driver is "
            f"too old: {tf_install_command(tf.version, gpus=True)} and check nvidia-smi's "
            "'CUDA Version' is at least the one above."
        )
    if tf_gpus < driver_gpus:
        return (
            f"TensorFlow uses {tf_gpus} of the {driver_gpus} GPUs the driver sees "
            "(CUDA_VISIBLE_DEVICES may hide some)."
        )
    return f"TensorFlow {tf.version} can use all {tf_gpus} GPU(s)."
