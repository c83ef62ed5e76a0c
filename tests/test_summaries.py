"""The loss summaries the training program writes without TensorFlow (summaries.py), read back
by TensorFlow's record reader (which checks every checksum) and by TensorBoard's own reader,
in a subprocess: this test process must stay free of TensorFlow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dtgui.worker import summaries, tfrecord

READER = """
import json, sys
import tensorflow as tf
from tensorflow.core.util import event_pb2
from tensorboard.backend.event_processing import event_accumulator

path, logdir = sys.argv[1], sys.argv[2]
records = []
for raw in tf.data.TFRecordDataset(path):  # raises DataLossError on a bad checksum
    event = event_pb2.Event.FromString(raw.numpy())
    records.append([event.step, [[v.tag, v.simple_value] for v in event.summary.value],
                    event.file_version])
acc = event_accumulator.EventAccumulator(logdir, size_guidance={"scalars": 0})
acc.Reload()
board = {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
print(json.dumps({"records": records, "board": board}))
"""


def read_back(path: str, logdir: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", READER, path, logdir], capture_output=True,
                         text=True, check=True, timeout=240).stdout
    read: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return read


@pytest.mark.slow
def test_tensorflow_and_tensorboard_read_every_value_across_varint_widths(
        tmp_path: Path) -> None:
    # Steps crossing the 1-, 2-, 3- and 5-byte varint widths within one call, a call too
    # short for the matrix path, a single value and a long tag (the one-by-one path).
    calls = [np.arange(100, 20_000, 37), np.arange(5, 8), np.array([2**35, 2**35 + 9])]
    writer = summaries.Scalars(str(tmp_path), "worker:0")
    expected: dict[str, list[tuple[int, float]]] = {"loss": [], "epoch_loss": [], "v" * 120: []}
    rng = np.random.default_rng(0)
    for steps in calls:
        values = rng.random(len(steps)).astype(np.float32)
        writer.series("loss", steps, values)
        expected["loss"] += list(zip(steps.tolist(), values.tolist(), strict=True))
    writer.scalar("epoch_loss", 0.125, 540)
    writer.series("v" * 120, np.arange(1, 40), np.full(39, 2.5))
    expected["epoch_loss"].append((540, 0.125))
    expected["v" * 120] += [(s, 2.5) for s in range(1, 40)]
    writer.close()

    found = read_back(writer.path, writer.logdir)
    assert found["records"][0][2] == summaries.FILE_VERSION
    values = found["records"][1:]
    assert len(values) == sum(len(v) for v in expected.values())
    for tag, points in expected.items():
        got = [(step, value) for step, [[t, value]], _ in values if t == tag]
        assert got == points
        assert [tuple(p) for p in found["board"][tag]] == points


def test_the_matrix_path_writes_the_same_bytes_as_one_record_at_a_time() -> None:
    steps = np.concatenate([np.arange(0, 300), np.arange(16_380, 16_390), [2**40]])
    values = np.linspace(-3, 3, len(steps), dtype=np.float32)
    values[7] = np.nan
    one_by_one = b"".join(tfrecord.frame(summaries.scalar_event("loss", int(s), float(v), 7.5))
                          for s, v in zip(steps, values, strict=True))
    assert summaries.scalar_records("loss", steps, values, 7.5) == one_by_one
