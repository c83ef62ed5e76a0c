"""TensorBoard event files without TensorFlow: TFRecord framing and the scalars of `Event`s.

A TFRecord file is a sequence of records, each

    uint64 length (little endian) | uint32 masked crc32c(length) | data | uint32 masked crc32c(data)

and in an event file each record's data is a serialized `tensorflow.Event`, read here with the
`tensorboard` package's compiled protos (they need protobuf only, not TensorFlow). The scalars
are in `Event.summary.value[]`: either `simple_value` (TF1, tf_keras's TensorBoard callback) or
a `tensor` holding one number (TF2 `tf.summary.scalar`).

The checksums use the C crc32c of `google-crc32c` (a dependency of dtgui); a bundle run with a
Python that lacks it computes them in Python (~20x slower).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

try:
    from tensorboard.compat.proto import event_pb2
except ImportError:  # a bundle run with a Python that has no tensorboard: see `event_decoder`
    event_pb2 = None

_HEADER = 12  # length (8) + its crc (4)
_FOOTER = 4
MAX_RECORD = 256 * 1024 * 1024  # a longer length is a damaged file, not a record


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


CRC32C_TABLE = _crc32c_table()


def python_crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) in Python: where google-crc32c is not installed."""
    crc = 0xFFFFFFFF
    table = CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


crc32c: Callable[[bytes], int]
try:
    from google_crc32c import value as crc32c
except ImportError:
    crc32c = python_crc32c


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


class RecordReader:
    """Reads the complete records appended to a file since the last call (by byte offset).

    A record not yet written to its end is left for a later call: nothing is lost or read
    twice while a writer appends. At a damaged record (a checksum or length that does not fit)
    the records before it are returned, `damaged` says where, and the reader skips to the end
    of what is there."""

    def __init__(self, path: str, offset: int = 0, check_data_crc: bool = True) -> None:
        self.path = path
        self.offset = offset
        self.check_data_crc = check_data_crc
        self.damaged = ""
        # Kept open: a file deleted by its writer (tf_keras removes a worker's scratch folder
        # when fit ends) can still be read to its end.
        self._file: BinaryIO | None = None

    def _read(self, offset: int, size: int) -> bytes:
        if self._file is None:
            try:
                self._file = open(self.path, "rb")  # noqa: SIM115 - kept for later reads
            except FileNotFoundError:
                return b""
        self._file.seek(offset)
        return self._file.read(size)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def read_new(self, max_bytes: int = 16 * 1024 * 1024) -> list[bytes]:
        chunk = self._read(self.offset, max_bytes)
        records: list[bytes] = []
        pos = 0
        while len(chunk) - pos >= _HEADER:
            header = chunk[pos: pos + 8]
            (length,) = struct.unpack("<Q", header)
            (length_crc,) = struct.unpack("<I", chunk[pos + 8: pos + 12])
            if masked_crc32c(header) != length_crc or length > MAX_RECORD:
                self.damaged = f"{self.path}: damaged record header at byte {self.offset + pos}"
                self.offset += len(chunk)
                return records
            end = pos + _HEADER + length + _FOOTER
            if end > len(chunk):
                if length + _HEADER + _FOOTER > max_bytes:  # longer than one read: read it whole
                    chunk = chunk[:pos] + self._read(self.offset + pos,
                                                     length + _HEADER + _FOOTER)
                    if end > len(chunk):
                        break
                else:
                    break  # written in part: wait for the rest
            data = chunk[pos + _HEADER: pos + _HEADER + length]
            (data_crc,) = struct.unpack("<I", chunk[end - _FOOTER: end])
            pos = end
            if self.check_data_crc and masked_crc32c(data) != data_crc:
                self.damaged = f"{self.path}: damaged record before byte {self.offset + pos}"
                continue
            records.append(data)
        self.offset += pos
        return records


def frame(data: bytes) -> bytes:
    """One TFRecord: `data` with its length and their checksums."""
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc32c(header)) + data \
        + struct.pack("<I", masked_crc32c(data))


def write_record(f: BinaryIO, data: bytes) -> None:
    """Append one TFRecord (tests write damaged and partial files with it)."""
    f.write(frame(data))


@dataclass(frozen=True)
class Scalar:
    tag: str
    step: int
    value: float
    wall_time: float
    plugin: str = ""  # the value's metadata plugin name, when it carries metadata


EventDecoder = Callable[[bytes], list[Scalar]]
_DT_FLOAT = 1
_NUMBER_KINDS = "fiub"  # numpy kinds of a tensor that is one number


def _tensor_number(tensor: Any) -> float | None:
    """The number a TensorProto holds, when it holds exactly one number (else None)."""
    if tensor.tensor_shape.dim:
        return None
    if tensor.dtype == _DT_FLOAT and len(tensor.tensor_content) == 4:  # tf.summary.scalar
        return float(struct.unpack("<f", tensor.tensor_content)[0])
    from tensorboard.util import tensor_util

    try:
        array = tensor_util.make_ndarray(tensor)
    except (TypeError, ValueError):
        return None
    return float(array) if array.shape == () and array.dtype.kind in _NUMBER_KINDS else None


def decode_event(data: bytes) -> list[Scalar]:
    """The scalars of one serialized Event (raises on a record that is not one)."""
    assert event_pb2 is not None
    event = event_pb2.Event.FromString(data)
    out = []
    for value in event.summary.value:
        kind = value.WhichOneof("value")
        if kind == "simple_value":
            number: float | None = value.simple_value
        elif kind == "tensor":
            number = _tensor_number(value.tensor)
        else:
            continue
        if number is not None:
            plugin = value.metadata.plugin_data.plugin_name if value.HasField("metadata") \
                else ""
            out.append(Scalar(value.tag, int(event.step), float(number), event.wall_time,
                              plugin))
    return out


def event_decoder() -> EventDecoder | None:
    """The function decoding one event record; None where the tensorboard package is not
    installed (TensorFlow 2.21 no longer brings it; a script that writes summaries needs it
    anyway: tf.summary raises TBNotInstalledError without it)."""
    return decode_event if event_pb2 is not None else None


def scalars_of(data: bytes, decoder: EventDecoder = decode_event) -> list[Scalar]:
    """The scalars of one event record ([] for a record that is not a valid Event)."""
    try:
        return decoder(data)
    except Exception:  # noqa: BLE001 - a foreign or damaged record carries no scalar
        return []
