"""What this machine has (CPU, RAM, GPUs through NVML) and what TensorFlow can use of it.

Detection reads /proc and NVML (through the machine probe's functions, in this process); it
never imports TensorFlow. What TensorFlow sees comes from the machine probe run in a
subprocess (`dtgui.remote.probe.tensorflow_view`), read by `tf_view`.
"""

from __future__ import annotations

import platform
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dtgui.worker import machine_probe


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    mem_total: int
    mem_used: int
    util: float
    driver: str = ""
    compute_capability: str = ""
    processes: int = 0  # compute processes running on it (another program's work)


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


def read_nvml_gpus() -> tuple[list[GpuInfo], str]:
    """GPUs as the NVIDIA driver sees them; an explanation instead when NVML is unavailable."""
    found = machine_probe.nvml_gpus()
    if "error" in found:
        return [], str(found["error"])
    return [GpuInfo(**g) for g in found["gpus"]], ""


def detect_local() -> MachineFacts:
    """Everything but the TensorFlow view. Reads files and NVML: call it off the UI thread."""
    system = machine_probe.system_facts()
    gpus, nvml_error = read_nvml_gpus()
    return MachineFacts(
        hostname=system["hostname"],
        os_name=system["os_name"] or system["kernel"],
        python=platform.python_version(),
        cpu_model=system["cpu_model"],
        cpu_cores=system["cpu_cores"] or 1,
        ram_total=system["ram_total"],
        gpus=gpus,
        nvml_error=nvml_error,
    )


def tf_view(data: Mapping[str, Any]) -> TfView:
    """TensorFlow's view from what the machine probe's `--tensorflow devices` reported."""
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
