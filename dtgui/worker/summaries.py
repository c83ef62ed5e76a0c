"""TensorBoard scalars without the tensorboard package (TF 2.21 no longer depends on it).

``tf.summary.scalar`` raises TBNotInstalledError when tensorboard is missing, so write the
same record TensorBoard's scalar plugin writes: ``tf.summary.write`` + "scalars" metadata.
"""

from __future__ import annotations

import os
from typing import Any

import tensorflow as tf
from tensorflow.core.framework import summary_pb2


def _scalar_metadata() -> bytes:
    meta = summary_pb2.SummaryMetadata()
    meta.plugin_data.plugin_name = "scalars"
    meta.data_class = summary_pb2.DATA_CLASS_SCALAR
    return meta.SerializeToString()


_METADATA = _scalar_metadata()


class Scalars:
    """Writes scalars under ``<out>/tensorboard/<task-with-dash>``."""

    def __init__(self, out_dir: str, task: str) -> None:
        self.logdir = os.path.join(out_dir, "tensorboard", task.replace(":", "-"))
        self._writer: Any = tf.summary.create_file_writer(self.logdir)

    def scalar(self, tag: str, value: float, step: int) -> None:
        with self._writer.as_default():
            tf.summary.write(tag, tf.constant(value, tf.float32), step=step, metadata=_METADATA)

    def flush(self) -> None:
        self._writer.flush()
