"""What TensorFlow sees here: ``python -m dtgui.worker.tf_probe`` prints ONE JSON object:
``python``, ``platform``, ``tensorflow``, ``keras``, ``built_with_cuda``, ``cuda_version``,
``cudnn_version``, ``physical_devices`` ([{"name", "device_type"}]), ``gpu_details``
([{"name", "device_name", "compute_capability"}]) and ``error`` (null when all went well).

Always exits 0; when TensorFlow cannot be imported the object carries ``"error"``.
"""

from __future__ import annotations

import contextlib
import json
import platform
import sys
import traceback
from typing import Any


def probe() -> dict[str, Any]:
    result: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform(),
                              "tensorflow": None, "keras": None, "built_with_cuda": None,
                              "cuda_version": None, "cudnn_version": None,
                              "physical_devices": [], "gpu_details": [], "error": None}
    try:
        import tensorflow as tf
    except Exception as exc:  # noqa: BLE001 - a broken install fails in many ways; reported as text
        result["error"] = f"Cannot import tensorflow: {type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()
        return result
    result["tensorflow"] = tf.__version__
    errors: list[str] = []
    try:
        import keras

        result["keras"] = keras.__version__
    except Exception as exc:  # noqa: BLE001 - reported as text, the probe goes on
        errors.append(f"Cannot import keras: {type(exc).__name__}: {exc}")
    try:
        result["built_with_cuda"] = bool(tf.test.is_built_with_cuda())
        info = tf.sysconfig.get_build_info()
        result["cuda_version"] = info.get("cuda_version")
        result["cudnn_version"] = info.get("cudnn_version")
    except Exception as exc:  # noqa: BLE001 - reported as text, the probe goes on
        errors.append(f"build info: {type(exc).__name__}: {exc}")
    try:
        for dev in tf.config.list_physical_devices():
            result["physical_devices"].append({"name": dev.name, "device_type": dev.device_type})
            if dev.device_type == "GPU":
                details: dict[str, Any] = {}
                with contextlib.suppress(Exception):
                    details = dict(tf.config.experimental.get_device_details(dev))
                cc = details.get("compute_capability")
                result["gpu_details"].append({"name": dev.name,
                                              "device_name": details.get("device_name"),
                                              "compute_capability": list(cc) if cc else None})
    except Exception as exc:  # noqa: BLE001 - reported as text, the probe goes on
        errors.append(f"listing devices: {type(exc).__name__}: {exc}")
    if errors:
        result["error"] = "; ".join(errors)
    return result


def main() -> int:
    real_stdout = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):
            result = probe()
    except BaseException as exc:  # noqa: BLE001 - never fail: the GUI needs an answer
        result = {"error": f"{type(exc).__name__}: {exc}"}
    real_stdout.write(json.dumps(result, default=str) + "\n")
    real_stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
