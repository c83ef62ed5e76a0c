"""Whether a TensorFlow checkpoint's files are whole, read without TensorFlow: the resume's
check before anything starts (`dtgui.core.bundles.checkpoint_files`) and the training loop's
choice of the checkpoint it restores (`checkpoints.py`) ask the same questions here.

A `tf.train.CheckpointManager` directory holds a state file (`checkpoint`) naming the newest
checkpoint and the ones kept before it, and for each checkpoint `PREFIX.index` and its data
shards `PREFIX.data-<i>-of-<n>`. The index is a TensorFlow table (the LevelDB layout,
uncompressed): data blocks of prefix-compressed keys, an index block of their handles, a
48-byte footer ending with the table's magic number. Each key is a tensor's name; its value a
`BundleEntryProto` saying in which shard the tensor's bytes are, at which offset and how many
(the key "" holds the `BundleHeaderProto`, with the number of shards). A checkpoint is whole
when its index reads to its end and every shard is at least as long as the tensors its index
puts there: what a full disk, a power cut before the data reached the disk, or a copy cut
short leave is not.

stdlib only: copied into every bundle with the worker package.
"""

from __future__ import annotations

import os
import re
import struct

STATE_FILE = "checkpoint"
TABLE_MAGIC = struct.pack("<Q", 0xDB4775248B80FB57)  # tensorflow/core/lib/io/format.h
_FOOTER = 48  # two block handles padded to 40 bytes, then the magic number
_TRAILER = 5  # after each block: its compression type (1 byte) and crc (4)
_STATE_LINE = re.compile(r'^(model_checkpoint_path|all_model_checkpoint_paths):\s*"(.*)"\s*$',
                         re.MULTILINE)


class Damaged(ValueError):
    """The index cannot be read to its end: why, in words."""


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise Damaged("a number runs past its end")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _block(data: bytes, offset: int, size: int) -> bytes:
    if offset + size + _TRAILER > len(data):
        raise Damaged("a block lies past the end of the index")
    if data[offset + size] != 0:
        raise Damaged("a block is compressed (dtgui reads uncompressed indexes only)")
    return data[offset:offset + size]


def _entries(block: bytes) -> list[tuple[bytes, bytes]]:
    """(key, value) of every entry of a table block."""
    if len(block) < 4:
        raise Damaged("a block is too short")
    restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
    end = len(block) - 4 - 4 * restarts
    if end < 0:
        raise Damaged("a block's restart points run past its start")
    out: list[tuple[bytes, bytes]] = []
    pos, key = 0, b""
    while pos < end:
        shared, pos = _read_varint(block, pos)
        own, pos = _read_varint(block, pos)
        size, pos = _read_varint(block, pos)
        if shared > len(key) or pos + own + size > end:
            raise Damaged("an entry runs past its block")
        key = key[:shared] + block[pos:pos + own]
        pos += own
        out.append((key, block[pos:pos + size]))
        pos += size
    return out


def _fields(message: bytes) -> dict[int, int]:
    """The integer fields of a protobuf message (the last value of each), by number."""
    out: dict[int, int] = {}
    pos = 0
    while pos < len(message):
        tag, pos = _read_varint(message, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            out[number], pos = _read_varint(message, pos)
        elif wire == 1:
            pos += 8
        elif wire == 2:
            size, pos = _read_varint(message, pos)
            pos += size
        elif wire == 5:
            out[number] = struct.unpack_from("<I", message, pos)[0] if pos + 4 <= len(
                message) else 0
            pos += 4
        else:
            raise Damaged(f"a tensor's entry has an unknown field type {wire}")
        if pos > len(message):
            raise Damaged("a tensor's entry runs past its end")
    return out


def shard_needs(index: bytes) -> tuple[int, dict[int, int]]:
    """The number of data shards and, for each shard, the bytes its tensors reach to, from
    the bytes of a checkpoint's index. Raises Damaged."""
    if len(index) < _FOOTER or index[-len(TABLE_MAGIC):] != TABLE_MAGIC:
        raise Damaged("it does not end as a TensorFlow checkpoint index")
    footer = index[-_FOOTER:]
    _, pos = _read_varint(footer, 0)
    _, pos = _read_varint(footer, pos)  # the metaindex: nothing dtgui needs
    offset, pos = _read_varint(footer, pos)
    size, _ = _read_varint(footer, pos)
    shards, needs = 1, dict[int, int]()
    for _, handle in _entries(_block(index, offset, size)):
        block_offset, at = _read_varint(handle, 0)
        block_size, _ = _read_varint(handle, at)
        for key, value in _entries(_block(index, block_offset, block_size)):
            entry = _fields(value)
            if key == b"":  # BundleHeaderProto: num_shards = 1
                shards = entry.get(1, 1) or 1
                continue
            # BundleEntryProto: shard_id = 3, offset = 4, size = 5
            shard, end = entry.get(3, 0), entry.get(4, 0) + entry.get(5, 0)
            needs[shard] = max(needs.get(shard, 0), end)
    return shards, needs


def shard_name(prefix: str, shard: int, shards: int) -> str:
    return f"{prefix}.data-{shard:05d}-of-{shards:05d}"


def checkpoint_problem(directory: str, prefix: str) -> str:
    """Why the checkpoint `prefix` (a name in `directory`, "ckpt-9") cannot be restored, in
    words ("" = it is whole)."""
    index_name = f"{prefix}.index"
    try:
        with open(os.path.join(directory, index_name), "rb") as f:
            index = f.read()
    except FileNotFoundError:
        return f"it has no {index_name}: it is incomplete"
    except OSError as exc:
        return f"{index_name} cannot be read ({exc.strerror})"
    try:
        shards, needs = shard_needs(index)
    except Damaged as exc:
        return f"{index_name} is damaged: {exc}"
    missing, short = [], []
    for shard in range(shards):
        name = shard_name(prefix, shard, shards)
        try:
            size = os.path.getsize(os.path.join(directory, name))
        except OSError:
            missing.append(str(shard))
            continue
        if size < needs.get(shard, 0):
            short.append(f"{name} holds {size} of its {needs[shard]} bytes")
    if missing:
        return (f"it is incomplete: data shard(s) {', '.join(missing)} of {shards} are "
                "missing")
    if short:
        return f"it was cut short ({'; '.join(short)})"
    return ""


def step_of(prefix: str) -> int:
    """The step in a checkpoint's name ("ckpt-9": 9; 0 when it has none)."""
    text = prefix.rpartition("-")[2]
    return int(text) if text.isdigit() else 0


def listed(directory: str) -> list[str]:
    """The checkpoints the state file of `directory` names, newest first (names, not paths).
    Raises OSError when it cannot be read, ValueError when it names none."""
    with open(os.path.join(directory, STATE_FILE), encoding="utf-8", errors="replace") as f:
        state = f.read()
    newest, kept = "", []
    for match in _STATE_LINE.finditer(state):
        name = os.path.basename(match.group(2))
        if match.group(1) == "model_checkpoint_path":
            newest = name
        elif name not in kept:
            kept.append(name)
    if not newest:
        raise ValueError("it names no checkpoint")
    older = sorted((n for n in kept if n != newest), key=step_of, reverse=True)
    return [newest, *older]


def newest_whole(directory: str) -> tuple[str, list[tuple[str, str]]]:
    """The newest checkpoint of `directory` that is whole ("" = none) and the newer ones
    skipped, each with why. Raises OSError / ValueError as `listed`."""
    skipped: list[tuple[str, str]] = []
    for name in listed(directory):
        problem = checkpoint_problem(directory, name)
        if not problem:
            return name, skipped
        skipped.append((name, problem))
    return "", skipped
