"""Gradients compressed for the all-reduce: cast to float16 or bfloat16 before the collective,
summed in it, cast back to float32 before the update.

On a link of 1 Gbit/s the all-reduce, not the device, decides a step: half the bytes on the
wire is nearly half the step. What is learned is the float32 update of a gradient rounded to
the wire dtype once per update (the optimizer's state and the variables stay float32).

Keras' optimizer all-reduces the gradients it is given (in float32) before every update and
has no public switch to skip it; dtgui's loop all-reduces them itself, compressed, and then
hands the optimizer the sums with its own all-reduce turned into a pass-through (the
gradients are already the same on every replica, as they would be after its all-reduce).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from .plan import GradCompression, Plan

# The collective a cross-worker all-reduce runs (its kernels say which dtypes a device can
# sum); a single process's all-reduce adds on a device, which every dtype here can.
_COLLECTIVE_OP = "CollectiveReduceV2"
_WIRE_DTYPES = {GradCompression.FLOAT16: tf.float16, GradCompression.BFLOAT16: tf.bfloat16}


def wire_dtype(compression: GradCompression) -> Any:
    """The dtype gradients cross the network in (None: float32, uncompressed)."""
    return _WIRE_DTYPES.get(compression)


def _collective_sums(dtype: Any, device_type: str) -> bool:
    """Whether this TensorFlow has a collective all-reduce kernel for `dtype` on
    `device_type` ("CPU", "GPU")."""
    from tensorflow.python.framework import kernels

    wanted = dtype.as_datatype_enum
    for kernel in kernels.get_registered_kernels_for_op(_COLLECTIVE_OP).kernel:
        if kernel.device_type != device_type:
            continue
        allowed = [c.allowed_values.list.type for c in kernel.constraint if c.name == "T"]
        if not allowed or wanted in allowed[0]:
            return True
    return False


def usable_compression(plan: Plan, optimizer: Any) -> tuple[GradCompression, str]:
    """The compression this task applies, and why it falls back to none ("" when it does
    not). Every worker decides alike from the same plan and the same TensorFlow, so their
    collectives still match."""
    wanted = GradCompression(plan.grad_compression)
    if wanted is GradCompression.NONE:
        return wanted, ""
    dtype = _WIRE_DTYPES[wanted]
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer
    if not callable(getattr(inner, "_all_reduce_sum_gradients", None)):
        return GradCompression.NONE, (
            f"gradients are all-reduced in float32, not {wanted}: this Keras "
            f"({type(inner).__module__}) gives dtgui no way to skip its optimizer's own "
            "all-reduce")
    if not plan.strategy.all_reduces_gradients:
        return GradCompression.NONE, (
            f"gradients are not compressed: {plan.strategy.no_levers_reason()}")
    device = "GPU" if plan.on_gpu else "CPU"
    if plan.strategy.collective_across_workers and not _collective_sums(dtype, device):
        return GradCompression.NONE, (
            f"gradients are all-reduced in float32: this TensorFlow's collective cannot sum "
            f"{wanted} on {device}")
    return wanted, ""


def skip_optimizer_all_reduce(optimizer: Any) -> None:
    """The optimizer applies the gradients it is given as they are: they were all-reduced
    (compressed) already, and a second, float32 all-reduce would cost what compression
    saved."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)

    def as_given(grads_and_vars: Any) -> list[Any]:
        return list(grads_and_vars)

    inner._all_reduce_sum_gradients = as_given


def all_reduce_compressed(grads: list[Any], dtype: Any, bytes_per_pack: int) -> list[Any]:
    """In a replica's context: every replica's gradients summed, crossing the network as
    `dtype` and returned as float32 (a gradient of IndexedSlices keeps its indices)."""
    context = tf.distribute.get_replica_context()

    def cast(g: Any, to: Any) -> Any:
        if isinstance(g, tf.IndexedSlices):
            return tf.IndexedSlices(tf.cast(g.values, to), g.indices, g.dense_shape)
        return tf.cast(g, to)

    options = tf.distribute.experimental.CommunicationOptions(bytes_per_pack=bytes_per_pack)
    summed = context.all_reduce(tf.distribute.ReduceOp.SUM, [cast(g, dtype) for g in grads],
                                options=options)
    return [cast(s, g.dtype) for s, g in zip(summed, grads, strict=True)]
