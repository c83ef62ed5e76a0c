"""What TensorFlow sees on this machine, remembered from one start of the app to the next.

Asking it imports TensorFlow in a subprocess (`model_check.probe_tensorflow`: 3-4 s of CPU)
for an answer that changes only when the installation or the GPUs change. A view is
remembered in `data_dir()/tf-view.json` under what it depends on, all read here without
importing TensorFlow: this interpreter, the versions of its TensorFlow, Keras and NVIDIA
packages (package metadata), the GPUs the driver lists (NVML), and the variables that choose
devices and libraries. A view with an error is not remembered (a probe cut short by the app's
exit is one); the panel's Refresh asks again.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from dtgui.core.machines.hardware import GpuInfo, TfView
from dtgui.core.settings import atomic_write_text, data_dir, read_json_or_backup
from dtgui.launch.checks.model_check import probe_tensorflow

# distributions whose versions decide what TensorFlow sees (name prefixes, lower case)
VIEW_PACKAGES = ("tensorflow", "tf-keras", "tf_keras", "keras", "nvidia-")
VIEW_VARIABLES = ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "TF_USE_LEGACY_KERAS")


def _view_file() -> Path:
    return data_dir() / "tf-view.json"


def view_key(gpus: Sequence[GpuInfo]) -> str:
    """What this interpreter's TensorFlow view depends on, as one string."""
    packages = sorted(f"{name}=={dist.version}" for dist in importlib.metadata.distributions()
                      if (name := str(dist.metadata["Name"] or "").lower()).startswith(
                          VIEW_PACKAGES))
    devices = [f"{g.index}:{g.name}:{g.driver}:{g.compute_capability}" for g in gpus]
    variables = {name: os.environ.get(name) for name in VIEW_VARIABLES}
    return json.dumps([os.path.realpath(sys.executable), packages, devices, variables])


def remembered_view(key: str) -> TfView | None:
    data, _ = read_json_or_backup(_view_file())
    seen = (data or {}).get(key)
    if not isinstance(seen, dict):
        return None
    try:
        return TfView(**{**seen, "gpus": tuple(seen.get("gpus", ()))})
    except TypeError:  # written by another version of dtgui
        return None


def local_tf_view(gpus: Sequence[GpuInfo], fresh: bool = False) -> TfView:
    """What TensorFlow sees with this interpreter (`gpus`: what NVML lists here): the view
    remembered for the same installation, GPUs and variables, else (or when `fresh`) asked
    in a subprocess and remembered when it has no error. Blocks: call it off the UI thread."""
    key = view_key(gpus)
    if not fresh:
        seen = remembered_view(key)
        if seen is not None:
            return seen
    view = probe_tensorflow()
    if view.version and not view.error:  # one installation: only its view is kept
        with contextlib.suppress(OSError):
            atomic_write_text(_view_file(), json.dumps({key: asdict(view)}, indent=1) + "\n")
    return view
