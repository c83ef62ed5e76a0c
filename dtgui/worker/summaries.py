"""TensorBoard scalars without TensorFlow or the tensorboard package.

``tf.summary.scalar`` raises TBNotInstalledError when tensorboard is missing (TF 2.21 no longer
depends on it), an in-graph ``tf.summary.write`` costs ~50 us a value, and even a protobuf
built in Python and framed by ``tf.io.TFRecordWriter`` costs ~10 us: for a small model at
1,600 steps/s that alone is over 1 % of training. So the file is written here: each value is
one ``Event`` (a ``simple_value`` scalar, which TensorBoard's scalar dashboard reads) framed as
a TFRecord (tfrecord.py). The training loss is written for every step (as ``log_every``
thins it), not one value per call: a call's size grows from 1 to thousands of steps while
training, so one mean a call would change the curve's noise with dtgui's call size and leave a
short run a handful of points; TensorBoard shows a sample of 1,000 exact values a tag by
default, and all of them with ``--samples_per_plugin scalars=0``.

The events of one training call differ only in their step and value, so they are laid out as
rows of a byte matrix, and each row's checksum is the shared part's plus a looked-up term for
each of its few varying bytes: 0.3 us a value, where framing record by record costs ~5 us a
value even with a C crc32c (the Python that builds each record is the cost).
"""

from __future__ import annotations

import functools
import itertools
import os
import socket
import struct
import time
from collections.abc import Sequence
from typing import BinaryIO

import numpy as np

from .layout import tensorboard_dir
from .tfrecord import CRC32C_TABLE, crc32c, frame

FILE_VERSION = "brain.Event:2"
_CRC_TABLE = np.array(CRC32C_TABLE, dtype=np.uint32)
# Fewer values than this are framed one by one (~5 us each with google-crc32c): the matrix
# costs ~75 us whatever the number of rows.
VECTOR_MIN_ROWS = 16


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def scalar_event(tag: str, step: int, value: float, wall_time: float) -> bytes:
    """One Event record's data: wall_time (1), step (2), summary (5) holding one value with
    tag (1) and simple_value (2)."""
    summary_value = _field(1, tag.encode()) + b"\x15" + struct.pack("<f", value)
    event = b"\x09" + struct.pack("<d", wall_time) + b"\x10" + _varint(step & (2**64 - 1)) \
        + _field(5, _field(1, summary_value))
    return event


def version_event(wall_time: float) -> bytes:
    return b"\x09" + struct.pack("<d", wall_time) + _field(3, FILE_VERSION.encode())


@functools.lru_cache(maxsize=64)
def _byte_contributions(trailing: int) -> np.ndarray:
    """What a byte followed by `trailing` bytes adds to a crc32c (the crc is linear in the
    message bits): table[v] for every byte value v."""
    table = _CRC_TABLE.copy()
    for _ in range(trailing):
        table = _CRC_TABLE[table & 0xFF] ^ (table >> 8)
    return table


def _records_of_one_width(tag: str, steps: np.ndarray, values: np.ndarray, wall_time: float,
                          width: int) -> bytes:
    """Framed records of steps whose varints are all `width` bytes long: one template record
    (step and value zeroed) repeated, the varying bytes filled in, and each record's checksum
    the template's plus a looked-up term for each of its varying bytes (a crc is linear in the
    message bits)."""
    n = len(steps)
    template = scalar_event(tag, 1 << 7 * (width - 1) if width > 1 else 0, 0.0, wall_time)
    step_at = 10  # after wall_time (1 + 8 bytes) and the step's key
    template = template[:step_at] + bytes(width) + template[step_at + width:]
    size = len(template)
    framed = np.tile(np.frombuffer(frame(template), dtype=np.uint8), (n, 1))
    data = framed[:, 12:12 + size]
    for i in range(width):
        group = (steps >> np.uint64(7 * i)) & np.uint64(0x7F)
        data[:, step_at + i] = group | np.uint64(0x80 if i < width - 1 else 0)
    data[:, size - 4:] = values.astype("<f4").view(np.uint8).reshape(n, 4)
    crc = np.full(n, crc32c(template), dtype=np.uint32)
    for column in (*range(step_at, step_at + width), *range(size - 4, size)):
        crc ^= _byte_contributions(size - 1 - column)[data[:, column]]
    masked = ((crc >> 15) | (crc << 17)) + np.uint32(0xA282EAD8)
    framed[:, 12 + size:] = masked.astype("<u4").view(np.uint8).reshape(n, 4)
    return framed.tobytes()


def _varint_width(step: int) -> int:
    return max(1, (step.bit_length() + 6) // 7)


def scalar_records(tag: str, steps: Sequence[int] | np.ndarray,
                   values: Sequence[float] | np.ndarray, wall_time: float) -> bytes:
    """The framed Event records of one value per step, in order."""
    step_array = np.asarray(steps, dtype=np.int64)
    value_array = np.asarray(values, dtype=np.float32)
    if len(step_array) != len(value_array):
        raise ValueError(f"{len(step_array)} steps but {len(value_array)} values")
    if len(step_array) < VECTOR_MIN_ROWS or len(tag.encode()) > 100 or step_array.min() < 0:
        return b"".join(frame(scalar_event(tag, int(s), float(v), wall_time))
                        for s, v in zip(step_array.tolist(), value_array.tolist(),
                                        strict=True))
    widths = [_varint_width(int(s)) for s in (step_array[0], step_array[-1])]
    if widths[0] == widths[1] and (np.diff(step_array) >= 0).all():
        runs = [(0, len(step_array), widths[0])]  # a training call: one run of widths
    else:
        every = np.array([_varint_width(s) for s in step_array.tolist()])
        bounds = [0, *(np.flatnonzero(np.diff(every)) + 1).tolist(), len(every)]
        runs = [(b, e, int(every[b])) for b, e in itertools.pairwise(bounds)]
    unsigned = step_array.astype(np.uint64)
    return b"".join(_records_of_one_width(tag, unsigned[b:e], value_array[b:e], wall_time, w)
                    for b, e, w in runs)


class Scalars:
    """Writes scalars under ``<out>/tensorboard/<task-with-dash>``."""

    def __init__(self, out_dir: str, task: str) -> None:
        self.logdir = tensorboard_dir(out_dir, task)
        os.makedirs(self.logdir, exist_ok=True)
        name = (f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}."
                f"{os.getpid()}.dtgui")
        self.path = os.path.join(self.logdir, name)
        self._file: BinaryIO | None = open(self.path, "ab")  # noqa: SIM115 - closed in close()
        self._file.write(frame(version_event(time.time())))
        self._file.flush()

    def scalar(self, tag: str, value: float, step: int) -> None:
        self.series(tag, [step], [value])

    def series(self, tag: str, steps: Sequence[int] | np.ndarray,
               values: Sequence[float] | np.ndarray) -> None:
        """One value per step, flushed at once (so TensorBoard sees them while training)."""
        if self._file is None:
            return
        self._file.write(scalar_records(tag, steps, values, time.time()))
        self._file.flush()

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
