"""Reachability pre-checks that must not wait on TensorFlow (no TF import here)."""

from __future__ import annotations

import socket

from .model_file import UserError

TPU_DEFAULT_PORT = 8470
TPU_CONNECT_TIMEOUT = 3.0


def tpu_precheck(address: str, timeout: float = TPU_CONNECT_TIMEOUT) -> str:
    """Fail within ``timeout`` seconds unless something answers at the TPU address.

    TPUClusterResolver + initialize_tpu_system hang when nothing listens at a ``grpc://``
    address, so dial it first. ``local`` (a TPU VM) has nothing to dial. Returns the address.
    """
    shown = address.strip() or "(empty address)"
    failure = f"No TPU answers at {shown}: check the address and that the TPU is up"
    target = address.strip()
    if target.startswith("grpc://"):
        target = target[len("grpc://"):]
    target = target.rstrip("/")
    if not target:
        raise UserError(failure)
    if target == "local":
        return address
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        host, port = target, str(TPU_DEFAULT_PORT)
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except (OSError, ValueError) as exc:
        raise UserError(failure, f"connecting to {host}:{port}: {type(exc).__name__}: {exc}") \
            from exc
    return address
