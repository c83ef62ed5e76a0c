"""Training steps reported in batches: the compact codec, reading schema 1 and 2 events, the
metrics they fill (vectorized, views never overwritten), and how many steps a call runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from dtgui.core.events import EventTail, parse_line, read_all, step_rows
from dtgui.core.live_run import LiveRun
from dtgui.core.series import Series
from dtgui.worker import step_batch
from dtgui.worker.call_size import StepsPerCall
from dtgui.worker.events import EventWriter


def steps_event(writer: EventWriter, first: int, losses: np.ndarray, ids: list[int],
                stride: int = 1, eps: float = 100.0) -> None:
    means = losses.mean(axis=1)
    writer.emit("steps", first=first, count=len(losses), stride=stride, epoch=1,
                replica_ids=ids, encoding=step_batch.ENCODING,
                losses=step_batch.encode(losses), means=step_batch.encode(means),
                loss=float(means[-1]), examples_per_sec=eps)


def test_codec_round_trips_every_float32_bit_for_bit() -> None:
    rng = np.random.default_rng(3)
    values = rng.standard_normal((250, 16)).astype(np.float32) * 3
    values[0, 0], values[1, 1], values[2, 2] = np.nan, np.inf, -0.0
    back = step_batch.decode(step_batch.encode(values), 250, 16)
    assert back.dtype == np.float32
    assert np.array_equal(back.view(np.uint32), values.view(np.uint32))  # the very bits


def test_codec_is_smaller_than_json_and_base64_of_raw_floats() -> None:
    steps = np.arange(1, 10_001)
    loss = (2.3 * np.exp(-steps / 3000)[:, None]
            * (1 + 0.2 * np.random.default_rng(1).standard_normal((10_000, 4))))
    loss = loss.astype(np.float32)
    text = step_batch.encode(loss)
    raw_b64 = (loss.nbytes * 4 + 2) // 3
    assert len(text) < 0.8 * raw_b64
    assert len(text) < 0.45 * len(json.dumps(loss.tolist()))


@pytest.mark.parametrize("damage", ["!!!", "AAAA", step_batch.encode(np.ones(3))])
def test_a_damaged_batch_is_refused_not_misread(damage: str) -> None:
    with pytest.raises(ValueError):
        step_batch.decode(damage, 4, 1)


def test_step_rows_of_both_schemas_and_damaged_events() -> None:
    v1 = {"kind": "step", "step": 7, "replica_losses": [1.5, None], "replica_ids": [2, 3],
          "loss": 1.5}
    rows = step_rows(v1)
    assert rows is not None and rows.steps.tolist() == [7] and rows.replica_ids == [2, 3]
    assert rows.losses[0, 0] == 1.5 and np.isnan(rows.losses[0, 1])
    losses = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
    v2 = {"kind": "steps", "first": 10, "count": 3, "stride": 5, "replica_ids": [0, 1],
          "encoding": step_batch.ENCODING, "losses": step_batch.encode(losses),
          "means": step_batch.encode(losses.mean(axis=1))}
    rows = step_rows(v2)
    assert rows is not None and rows.steps.tolist() == [10, 15, 20]
    assert rows.losses.tolist() == losses.tolist() and rows.means.tolist() == [1.5, 3.5, 5.5]
    assert step_rows({**v2, "count": 4}) is None
    assert step_rows({**v2, "encoding": "something-newer"}) is None
    assert step_rows({**v2, "losses": "@@"}) is None


def test_schema_1_and_2_files_are_read_and_unknown_versions_skipped() -> None:
    assert parse_line(json.dumps({"v": 1, "kind": "step", "task": "w", "t": 1})) is not None
    assert parse_line(json.dumps({"v": 2, "kind": "steps", "task": "w", "t": 1})) is not None
    assert parse_line(json.dumps({"v": 3, "kind": "steps", "task": "w", "t": 1})) is None


def test_metrics_from_batches_match_every_step_and_drop_non_finite(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path, "worker:0")
    writer.emit("started", replicas=2, replica_ids=[4, 5], steps=60)
    rng = np.random.default_rng(0)
    batches = [rng.random((n, 2)).astype(np.float32) for n in (1, 7, 20, 32)]
    batches[2][3, 1] = np.nan
    first = 1
    for i, losses in enumerate(batches):
        steps_event(writer, first, losses, [4, 5], eps=100.0 + i)
        if i == 1:
            writer.emit("device", devices=[{"kind": "cpu", "index": 0, "util": 50.0}])
        first += len(losses)
    writer.close()
    metrics = LiveRun()
    metrics.add_events(read_all(path))
    snap = metrics.snapshot()
    everything = np.concatenate(batches)
    x4, y4 = snap.replica_loss[4]
    assert x4.tolist() == list(range(1, 61)) and np.array_equal(y4, everything[:, 0])
    x5, _y5 = snap.replica_loss[5]
    assert len(x5) == 59 and 12 not in x5.tolist()  # step 9+3 was NaN on replica 5
    assert snap.step == 60 and snap.tasks["worker:0"].status == "running"
    tx, ty = snap.throughput["worker:0"]
    assert tx.tolist() == [1, 8, 28, 60] and ty.tolist() == [100, 101, 102, 103]


def test_a_restart_rewinds_the_curves_without_touching_views_handed_out(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path, "worker:0")
    writer.emit("started", replicas=1, replica_ids=[0], steps=20, resumed_from_step=0)
    steps_event(writer, 1, np.arange(1, 11, dtype=np.float32)[:, None], [0])
    writer.close()
    metrics = LiveRun()
    metrics.add_events(read_all(path))
    _held_x, held_y = metrics.snapshot().replica_loss[0]  # what the UI may be drawing
    tail = EventTail(path, offset=path.stat().st_size)
    writer = EventWriter(path, "worker:0")
    writer.emit("started", replicas=1, replica_ids=[0], steps=20, resumed_from_step=4)
    steps_event(writer, 5, np.full((3, 1), 99.0, np.float32), [0])
    writer.close()
    metrics.add_events(tail.read_new())
    x, y = metrics.snapshot().replica_loss[0]
    assert x.tolist() == [1, 2, 3, 4, 5, 6, 7] and y.tolist()[-3:] == [99, 99, 99]
    assert held_y.tolist() == list(range(1, 11))  # untouched


def test_series_grows_and_keeps_old_views() -> None:
    series = Series(capacity=2, dtype=np.float32)
    series.append(1, 1.0)
    view = series.view()
    series.extend(np.arange(2, 100), np.arange(2, 100))
    assert view[0].tolist() == [1.0] and series.size == 99 and series.view()[1][-1] == 99


def test_a_line_longer_than_one_read_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path, "worker:0")
    steps_event(writer, 1, np.ones((5000, 16), np.float32), list(range(16)))
    writer.close()
    events = EventTail(path).read_new(max_bytes=4096)
    assert len(events) == 1
    rows = step_rows(events[0].data)
    assert rows is not None and rows.losses.shape == (5000, 16)


def test_steps_per_call_grows_to_the_target_and_respects_bounds() -> None:
    sizer = StepsPerCall(0, replicas=2)
    assert sizer.next(0, 100, 0) == 1
    sizer.observe(5.0)  # the first call traces: ignored
    sizer.agree(sizer.proposal)
    assert sizer.k == 1
    sizes = []
    for _ in range(8):
        sizer.observe(0.001)  # 1 ms a step: 200 steps make 0.2 s
        sizer.agree(sizer.proposal)
        sizes.append(sizer.k)
    assert sizes[:4] == [4, 16, 64, 200] and sizes[-1] == 200  # at most x4 a call
    assert sizer.next(990, 1000, 0) == 10  # the end
    assert sizer.next(120, 1000, 50) == 30  # the next checkpoint
    assert StepsPerCall(0, replicas=1024).limit == 256  # one event stays under ~1 MB
    fixed = StepsPerCall(7, replicas=2)
    fixed.observe(1.0)
    fixed.observe(1.0)
    fixed.agree(500.0)
    assert fixed.next(0, 100, 0) == 7


def test_step_batch_prints_a_bundles_losses_as_csv(tmp_path: Path) -> None:
    path = tmp_path / "events-worker-0.jsonl"
    writer = EventWriter(path, "worker:0")
    steps_event(writer, 1, np.array([[0.5, 0.25], [1.0, 2.0]], np.float32), [0, 1])
    writer.close()
    out = subprocess.run([sys.executable, "-m", "dtgui.worker.step_batch", str(path)],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.splitlines() == ["step,loss,replica_0,replica_1", "1,0.375,0.5,0.25",
                                "2,1.5,1,2"]


def test_export_takes_steps_per_call_and_refuses_too_many(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dtgui.cli import main

    assert main(["export", str(tmp_path / "ok"), "--steps-per-call", "64"]) == 0
    plan = json.loads((tmp_path / "ok" / "plan.json").read_text())
    assert plan["steps_per_call"] == 64
    assert main(["export", str(tmp_path / "big"), "--steps-per-call", "20000"]) == 2
    assert "Steps per call" in capsys.readouterr().err
    assert not (tmp_path / "big").exists()


def test_validation_learning_rate_and_saved_models_reach_the_metrics(tmp_path: Path) -> None:
    """Two MultiWorkerMirrored workers report the same validation: it is kept once a step."""
    metrics = LiveRun()
    for task in ("worker:0", "worker:1"):
        path = tmp_path / f"{task}.jsonl"
        writer = EventWriter(path, task)
        writer.emit("started", replicas=1, replica_ids=[int(task[-1])], steps=40)
        for first, lr in ((1, 0.1), (21, 0.05)):
            losses = np.full((20, 1), 1.0 / first, np.float32)
            writer.emit("steps", first=first, count=20, stride=1, epoch=1,
                        replica_ids=[int(task[-1])], encoding=step_batch.ENCODING,
                        losses=step_batch.encode(losses), means=step_batch.encode(losses[:, 0]),
                        loss=1.0, examples_per_sec=10.0, lr=lr)
            writer.emit("validation", step=first + 19, epoch=1, loss=2.0 / first,
                        metrics={"top_5": 0.5 + first / 100}, examples=297)
        writer.emit("epoch", epoch=2, loss=0.7, steps=40, metrics={"top_5": 0.9})
        if task == "worker:0":
            writer.emit("model_saved", role="final", step=40, path="model/model.keras",
                        savedmodel="model/saved_model")
        writer.close()
        metrics.add_events(read_all(path))
    snap = metrics.snapshot()
    assert snap.validation["loss"][0].tolist() == [20, 40]
    assert snap.validation["loss"][1].tolist() == [2.0, 2.0 / 21]
    assert snap.validation["top_5"][1].tolist() == [0.51, 0.71]
    assert snap.learning_rate[0].tolist() == [20, 40]
    assert snap.learning_rate[1].tolist() == [0.1, 0.05]
    assert snap.models == [{"task": "worker:0", "t": snap.models[0]["t"], "role": "final",
                            "step": 40, "path": "model/model.keras",
                            "savedmodel": "model/saved_model"}]
    assert snap.last_epoch_metrics["top_5"] == 0.9 and "accuracy" not in snap.last_epoch_metrics
