"""dtgui's TensorFlow-free TensorBoard event reader (TFRecord framing, tensorboard's Event
protos) against files written by real TensorFlow, cross-checked with TensorBoard's own reader;
partial and damaged files."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from dtgui.worker import tfrecord
from dtgui.worker.tb_follow import TensorBoardFollower

WRITER = textwrap.dedent("""
    import sys
    import tensorflow as tf
    root = sys.argv[1]
    w = tf.summary.create_file_writer(root + "/tf2")
    with w.as_default():
        for step in range(1, 6):
            tf.summary.scalar("loss", 1.0 / step, step=step)
            tf.summary.scalar("lr", tf.constant(0.5, tf.float64), step=step)
            tf.summary.scalar("count", tf.constant(step * 3, tf.int64), step=step)
            tf.summary.histogram("weights", tf.random.normal([20]), step=step)
            tf.summary.text("note", "hello", step=step)
            tf.summary.image("img", tf.zeros([1, 2, 2, 1]), step=step)
    w.close()
    # TF1-style simple_value summaries (what tf_keras' TensorBoard callback used to write)
    v1 = tf.compat.v1
    w1 = tf.summary.create_file_writer(root + "/tf1")
    with w1.as_default():
        for step in range(3):
            pb = v1.Summary(value=[v1.Summary.Value(tag="acc", simple_value=0.25 * step)])
            tf.summary.experimental.write_raw_pb(pb.SerializeToString(), step=step)
    w1.close()
""")


@pytest.fixture(scope="module")
def tf_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tb")
    subprocess.run([sys.executable, "-c", WRITER, str(root)], check=True, timeout=180)
    return root


TENSORBOARD_READER = """
import json, sys
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.util import tensor_util

root = sys.argv[1]
out = {}
for run in ("tf2", "tf1"):
    acc = event_accumulator.EventAccumulator(root + "/" + run,
                                             size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    for tag in acc.Tags()["tensors"]:
        events = acc.Tensors(tag)
        arrays = [tensor_util.make_ndarray(e.tensor_proto) for e in events]
        if all(a.shape == () and a.dtype.kind in "fiu" for a in arrays):
            out[run + "/" + tag] = [(e.step, float(a)) for e, a in zip(events, arrays)]
    for tag in acc.Tags()["scalars"]:
        out[run + "/" + tag] = [(e.step, e.value) for e in acc.Scalars(tag)]
print(json.dumps(out))
"""


def tensorboard_scalars(root: Path) -> dict[str, list[tuple[int, float]]]:
    """What TensorBoard's own reader (EventAccumulator) sees as scalars, by run/tag. In a
    subprocess: TensorBoard's reader imports TensorFlow when it is installed, and this test
    process must stay free of it (the GUI tests check that it is)."""
    out = subprocess.run([sys.executable, "-c", TENSORBOARD_READER, str(root)],
                         capture_output=True, text=True, check=True, timeout=180).stdout
    found = json.loads(out.strip().splitlines()[-1])
    return {tag: [(int(step), float(value)) for step, value in values]
            for tag, values in found.items()}


def dtgui_scalars(root: Path) -> dict[str, list[tuple[int, float]]]:
    seen: dict[str, list[tuple[int, float]]] = {}
    follower = TensorBoardFollower([str(root)], lambda tag, s: seen.setdefault(tag, []).append(
        (s.step, s.value)))
    follower.poll_once()
    return seen


@pytest.mark.slow
def test_reader_matches_tensorboard(tf_files: Path) -> None:
    ours = dtgui_scalars(tf_files)
    theirs = tensorboard_scalars(tf_files)
    assert set(ours) == {"tf2/loss", "tf2/lr", "tf2/count", "tf1/acc"}
    assert set(ours) == set(theirs)
    for tag, points in theirs.items():
        assert [s for s, _ in ours[tag]] == [s for s, _ in points], tag
        assert [v for _, v in ours[tag]] == pytest.approx([v for _, v in points]), tag
    assert ours["tf2/loss"][0] == (1, 1.0)


@pytest.mark.slow
def test_partial_record_waits_for_the_rest(tf_files: Path, tmp_path: Path) -> None:
    source = next((tf_files / "tf2").glob("*tfevents*")).read_bytes()
    target = tmp_path / "run" / "events.out.tfevents.1.test"
    target.parent.mkdir()
    emitted: list[tuple[str, int, float]] = []
    follower = TensorBoardFollower([str(tmp_path)], lambda tag, s: emitted.append(
        (tag, s.step, s.value)))
    # Written in pieces of 7 bytes: every cut falls inside a header, a payload or a crc.
    with open(target, "wb") as f:
        for start in range(0, len(source), 7):
            f.write(source[start: start + 7])
            f.flush()
            follower.poll_once()
    assert follower.problems == []
    expected = dtgui_scalars(tf_files / "tf2")
    assert len(emitted) == sum(len(v) for v in expected.values())
    assert sorted(set(t for t, _, _ in emitted)) == sorted(f"run/{t}" for t in expected)


def test_damaged_record_is_reported_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.2.test"
    good = _event(3, "loss", 0.5)
    with open(path, "wb") as f:
        tfrecord.write_record(f, good)
        raw = bytearray()
    data = path.read_bytes()
    damaged = bytearray(data)
    damaged[14] ^= 0xFF  # a payload byte: its crc no longer fits
    path.write_bytes(bytes(damaged) + data)
    reader = tfrecord.RecordReader(str(path))
    records = reader.read_new()
    assert records == [good] and "damaged" in reader.damaged
    assert raw == bytearray()
    path.write_bytes(b"\x01" * 40)  # garbage where a header should be
    reader = tfrecord.RecordReader(str(path))
    assert reader.read_new() == [] and reader.damaged


@pytest.mark.parametrize("crc32c", [tfrecord.crc32c, tfrecord.python_crc32c],
                         ids=["google-crc32c", "python"])
def test_crc32c_known_values(crc32c: Callable[[bytes], int]) -> None:
    assert crc32c(b"") == 0
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c(b"\x00" * 32) == 0x8A9136AA  # RFC 3720 B.4
    data = bytes(range(256)) * 3
    assert crc32c(data) == tfrecord.python_crc32c(data)


def test_the_c_crc32c_is_used_where_installed() -> None:
    assert tfrecord.crc32c is not tfrecord.python_crc32c


def test_without_tensorboard_the_follower_says_why_it_reads_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tfrecord, "event_pb2", None)
    with open(tmp_path / "events.out.tfevents.1.test", "wb") as f:
        tfrecord.write_record(f, _event(1, "loss", 1.0))
    follower = TensorBoardFollower([str(tmp_path)], lambda tag, s: None)
    assert follower.poll_once() == 0 and follower.poll_once() == 0
    assert len(follower.problems) == 1 and "tensorboard package" in follower.problems[0]


def test_deleted_file_is_read_to_its_end(tmp_path: Path) -> None:
    """tf_keras deletes a non-chief worker's scratch folder when fit ends: what it wrote after
    the follower found the file still arrives."""
    scratch = tmp_path / "train" / "workertemp_1"
    scratch.mkdir(parents=True)
    path = scratch / "events.out.tfevents.3.test"
    seen: list[tuple[str, int]] = []
    follower = TensorBoardFollower([str(tmp_path)], lambda tag, s: seen.append((tag, s.step)))
    with open(path, "wb") as f:
        tfrecord.write_record(f, _event(1, "epoch_loss", 1.0))
        f.flush()
        follower.poll_once()
        tfrecord.write_record(f, _event(2, "epoch_loss", 0.5))
    path.unlink()
    scratch.rmdir()
    follower.stop(drain=True)
    assert seen == [("train/epoch_loss", 1), ("train/epoch_loss", 2)]


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, wire: int, payload: bytes) -> bytes:
    key = _varint(number << 3 | wire)
    return key + (_varint(len(payload)) + payload if wire == 2 else payload)


def _event(step: int, tag: str, value: float) -> bytes:
    """An Event with one simple_value, encoded by hand (no protobuf library)."""
    import struct

    val = _field(1, 2, tag.encode()) + _field(2, 5, struct.pack("<f", value))
    summary = _field(1, 2, val)
    return (_field(1, 1, struct.pack("<d", 1.0)) + _field(2, 0, _varint(step))
            + _field(5, 2, summary))


def test_shared_folders_give_each_task_only_its_own_files(tmp_path: Path) -> None:
    from dtgui.worker.tb_follow import file_pid

    assert file_pid("events.out.tfevents.1795421841.vm.10626.0.v2") == 10626
    assert file_pid("events.out.tfevents.17.host.example.com.42.3.v2") == 42
    assert file_pid("events.out.tfevents.1795421841.vm") is None
    logs = tmp_path / "project" / "logs" / "train"
    logs.mkdir(parents=True)
    for pid, value in ((111, 1.0), (222, 2.0)):
        with open(logs / f"events.out.tfevents.5.vm.{pid}.0.v2", "wb") as f:
            tfrecord.write_record(f, _event(1, "epoch_loss", value))
    skipped = tmp_path / "project" / "skipped"
    skipped.mkdir()
    with open(skipped / "events.out.tfevents.5.vm.111.1.v2", "wb") as f:
        tfrecord.write_record(f, _event(1, "other", 9.0))
    seen: list[tuple[str, float]] = []
    follower = TensorBoardFollower([str(tmp_path / "own")], lambda tag, s: seen.append(
        (tag, s.value)), shared=[str(tmp_path / "project")], pid=111, skip=[str(skipped)])
    follower.poll_once()
    assert seen == [("logs/train/epoch_loss", 1.0)]
