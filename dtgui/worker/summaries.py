"""TensorBoard scalars without the tensorboard package (TF 2.21 no longer depends on it).

``tf.summary.scalar`` raises TBNotInstalledError when tensorboard is missing, and an in-graph
``tf.summary.write`` costs ~50 us a value, a few per cent of a small model's step. So the
event file is written here directly: one ``Event`` protocol buffer per value (a
``simple_value`` scalar, which TensorBoard's scalar dashboard reads) framed as a TFRecord by
``tf.io.TFRecordWriter``, about 9 us a value, once per training call.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable

import tensorflow as tf
from tensorflow.core.framework import summary_pb2
from tensorflow.core.util import event_pb2

FILE_VERSION = "brain.Event:2"


class Scalars:
    """Writes scalars under ``<out>/tensorboard/<task-with-dash>``."""

    def __init__(self, out_dir: str, task: str) -> None:
        self.logdir = os.path.join(out_dir, "tensorboard", task.replace(":", "-"))
        os.makedirs(self.logdir, exist_ok=True)
        name = (f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}."
                f"{os.getpid()}.dtgui")
        self.path = os.path.join(self.logdir, name)
        self._writer = tf.io.TFRecordWriter(self.path)
        self._writer.write(event_pb2.Event(wall_time=time.time(),
                                           file_version=FILE_VERSION).SerializeToString())
        self._writer.flush()

    def scalar(self, tag: str, value: float, step: int) -> None:
        self.series(tag, [step], [value])

    def series(self, tag: str, steps: Iterable[int], values: Iterable[float]) -> None:
        """One value per step, flushed at once (so TensorBoard sees them while training)."""
        now = time.time()
        for step, value in zip(steps, values, strict=True):
            summary = summary_pb2.Summary(
                value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(value))])
            self._writer.write(event_pb2.Event(wall_time=now, step=int(step),
                                               summary=summary).SerializeToString())
        self._writer.flush()

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
