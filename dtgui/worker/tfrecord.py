"""TensorBoard event files without TensorFlow: TFRecord framing and the scalars of `Event`s.

A TFRecord file is a sequence of records, each

    uint64 length (little endian) | uint32 masked crc32c(length) | data | uint32 masked crc32c(data)

and in an event file each record's data is a serialized `tensorflow.Event`. The scalars are in
`Event.summary.value[]`: either `simple_value` (TF1, tf_keras's TensorBoard callback) or a
`tensor` holding one number (TF2 `tf.summary.scalar`: a DT_FLOAT scalar in `tensor_content`
or `float_val`). The protobufs are decoded with the `tensorboard` package's compiled protos
when it imports, else by the small wire-format reader below (only the fields needed).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

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


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


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


def write_record(f: BinaryIO, data: bytes) -> None:
    """Append one TFRecord (tests write damaged and partial files with it)."""
    header = struct.pack("<Q", len(data))
    f.write(header + struct.pack("<I", masked_crc32c(header)) + data
            + struct.pack("<I", masked_crc32c(data)))


# -- protobuf wire format ------------------------------------------------------------------

def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ValueError("varint too long")


def fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of a message: ints for varint/fixed, bytes for
    length-delimited (fixed64/fixed32 come as their raw 8/4 bytes)."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, wire, value
        elif wire == 1:
            yield number, wire, buf[pos: pos + 8]
            pos += 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            yield number, wire, buf[pos: pos + size]
            pos += size
        elif wire == 5:
            yield number, wire, buf[pos: pos + 4]
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    if pos > len(buf):
        raise ValueError("truncated message")


def _as_int(value: int | bytes) -> int:
    """A varint field's value; a field of another wire type where a number belongs is a
    damaged record."""
    if not isinstance(value, int):
        raise ValueError("a number was expected")
    return value


def _as_bytes(value: int | bytes) -> bytes:
    if not isinstance(value, bytes):
        raise ValueError("bytes were expected")
    return value


# TensorFlow DataType numbers -> struct formats of one element
_DTYPES = {1: "<f", 2: "<d", 3: "<i", 9: "<q", 19: "<e", 14: "bfloat16", 4: "<B", 5: "<h",
           6: "<b", 17: "<H", 10: "<?"}


def _bfloat16(raw: bytes) -> float:
    return struct.unpack("<f", b"\x00\x00" + raw[:2])[0]


def tensor_scalar(dtype: int, dims: int, content: bytes, floats: list[float],
                  doubles: list[float], ints: list[int], halves: list[int]) -> float | None:
    """The number a TensorProto holds, when it holds exactly one number (else None)."""
    if dims:
        return None
    fmt = _DTYPES.get(dtype)
    if fmt is None:
        return None
    if content:
        if fmt == "bfloat16":
            return _bfloat16(content) if len(content) == 2 else None
        if len(content) != struct.calcsize(fmt):
            return None
        return float(struct.unpack(fmt, content)[0])
    if dtype == 1 and len(floats) == 1:
        return floats[0]
    if dtype == 2 and len(doubles) == 1:
        return doubles[0]
    if dtype in (3, 9, 4, 5, 6, 17) and len(ints) == 1:
        return float(ints[0])
    if dtype in (19, 14) and len(halves) == 1:
        bits = struct.pack("<H", halves[0] & 0xFFFF)
        return _bfloat16(bits) if dtype == 14 else float(struct.unpack("<e", bits)[0])
    return None


def _packed(value: int | bytes, wire: int, fmt: str) -> list[float]:
    if wire == 2:
        size = struct.calcsize(fmt)
        raw = _as_bytes(value)
        return list(struct.unpack(f"<{len(raw) // size}{fmt}", raw[: len(raw) // size * size]))
    return list(struct.unpack(f"<{fmt}", _as_bytes(value)))


def _packed_varints(value: int | bytes, wire: int) -> list[int]:
    if wire == 0:
        return [_as_int(value)]
    raw, out, pos = _as_bytes(value), [], 0
    while pos < len(raw):
        v, pos = _varint(raw, pos)
        out.append(v - (1 << 64) if v >= 1 << 63 else v)
    return out


def _wire_tensor(buf: bytes) -> float | None:
    dtype = dims = 0
    content = b""
    floats: list[float] = []
    doubles: list[float] = []
    ints: list[int] = []
    halves: list[int] = []
    for number, wire, value in fields(buf):
        if number == 1 and wire == 0:
            dtype = _as_int(value)
        elif number == 2 and wire == 2:
            dims = sum(1 for n, _, _ in fields(_as_bytes(value)) if n == 2)
        elif number == 4 and wire == 2:
            content = _as_bytes(value)
        elif number == 5:
            floats += _packed(value, wire, "f")
        elif number == 6:
            doubles += _packed(value, wire, "d")
        elif number in (7, 10):
            ints += _packed_varints(value, wire)
        elif number == 13:
            halves += _packed_varints(value, wire)
    return tensor_scalar(dtype, dims, content, floats, doubles, ints, halves)


def _wire_plugin(metadata: bytes) -> str:
    for number, wire, value in fields(metadata):
        if number == 1 and wire == 2:  # plugin_data
            for n, w, v in fields(_as_bytes(value)):
                if n == 1 and w == 2:
                    return _as_bytes(v).decode("utf-8", "replace")
    return ""


@dataclass(frozen=True)
class Scalar:
    tag: str
    step: int
    value: float
    wall_time: float
    plugin: str = ""  # the value's metadata plugin name, when it carries metadata


def _wire_event(data: bytes) -> list[Scalar]:
    wall_time, step, summary = 0.0, 0, b""
    for number, wire, value in fields(data):
        if number == 1 and wire == 1:
            wall_time = struct.unpack("<d", _as_bytes(value))[0]
        elif number == 2 and wire == 0:
            step = _as_int(value)
            step = step - (1 << 64) if step >= 1 << 63 else step
        elif number == 5 and wire == 2:
            summary = _as_bytes(value)
    out = []
    for number, wire, value in fields(summary):
        if number != 1 or wire != 2:
            continue
        tag, number_value, plugin = "", None, ""
        for n, w, v in fields(_as_bytes(value)):
            if n == 1 and w == 2:
                tag = _as_bytes(v).decode("utf-8", "replace")
            elif n == 2 and w == 5:
                number_value = struct.unpack("<f", _as_bytes(v))[0]
            elif n == 8 and w == 2:
                number_value = _wire_tensor(_as_bytes(v))
            elif n == 9 and w == 2:
                plugin = _wire_plugin(_as_bytes(v))
        if tag and number_value is not None:
            out.append(Scalar(tag, step, float(number_value), wall_time, plugin))
    return out


EventDecoder = Callable[[bytes], list[Scalar]]


def _proto_event(event_pb2: Any) -> EventDecoder:
    def decode(data: bytes) -> list[Scalar]:
        event = event_pb2.Event.FromString(data)
        out = []
        for value in event.summary.value:
            kind = value.WhichOneof("value")
            if kind == "simple_value":
                number: float | None = value.simple_value
            elif kind == "tensor":
                t = value.tensor
                number = tensor_scalar(t.dtype, len(t.tensor_shape.dim), t.tensor_content,
                                       list(t.float_val), list(t.double_val),
                                       list(t.int_val) + list(t.int64_val), list(t.half_val))
            else:
                continue
            if number is not None:
                plugin = value.metadata.plugin_data.plugin_name if value.HasField("metadata") \
                    else ""
                out.append(Scalar(value.tag, int(event.step), float(number), event.wall_time,
                                  plugin))
        return out

    return decode


def event_decoder(prefer_protos: bool = True) -> EventDecoder:
    """The function decoding one event record: tensorboard's protos if importable (and not
    turned off with DTGUI_TB_WIRE=1), else the wire-format reader."""
    if prefer_protos and os.environ.get("DTGUI_TB_WIRE") != "1":
        try:
            from tensorboard.compat.proto import event_pb2
        except Exception:  # noqa: BLE001 - any import problem: the reader below
            pass
        else:
            return _proto_event(event_pb2)
    return _wire_event


def scalars_of(data: bytes, decoder: EventDecoder | None = None) -> list[Scalar]:
    """The scalars of one event record ([] for a record that is not a valid Event)."""
    try:
        return (decoder or _wire_event)(data)
    except Exception:  # noqa: BLE001 - a foreign or damaged record carries no scalar
        return []
