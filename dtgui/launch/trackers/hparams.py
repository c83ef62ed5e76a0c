"""TensorBoard's HParams summary of a run, written by whatever follows it (no TensorFlow).

When a run ends, `<bundle>/output/tensorboard/hparams/` gets one event file: the run's
settings as a session's hyperparameters, its final values as scalars (`final/loss`, the last
validation values `final/val_NAME`, a trial's objective) and the session's end with its
state. `tensorboard --logdir <runs folder>` (or a sweep's folder) then lists every run and
trial in its HParams table and parallel coordinates. The records are built with the
tensorboard package's protos and framed by dtgui.worker.tfrecord (the one TFRecord writer):
tensorboard's own event writer would import TensorFlow.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.live_run import LiveRun
from dtgui.core.runs.run_state import RunState
from dtgui.worker.layout import OUTPUT_DIR
from dtgui.worker.tfrecord import frame

HPARAMS_DIR = f"{OUTPUT_DIR}/tensorboard/hparams"
FILE_NAME = "events.out.tfevents.{t}.{host}.dtgui-hparams"
# TensorBoard has no "stopped": a stopped run's (a pruned trial's) status is unknown
STATUS = {RunState.FINISHED: api_pb2.STATUS_SUCCESS, RunState.FAILED: api_pb2.STATUS_FAILURE}
SKIPPED = ("schema", "run_name", "tasks", "cluster", "machines")


def settings_of(plan_dict: Mapping[str, Any], prefix: str = "") -> dict[str, bool | float | str]:
    """A plan's settings as hyperparameters (numbers stay numbers: TensorBoard sorts and
    draws them on an axis)."""
    out: dict[str, bool | float | str] = {}
    for key, value in plan_dict.items():
        if not prefix and key in SKIPPED:
            continue
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(settings_of(value, f"{name}."))
        elif isinstance(value, bool):
            out[name] = value
        elif isinstance(value, (int, float)):
            out[name] = float(value)
        elif isinstance(value, (list, tuple)):
            out[name] = " ".join(str(v) for v in value)
        elif value is not None:
            out[name] = str(value)
    return out


def final_values(metrics: LiveRun) -> dict[str, float]:
    """The run's final loss and last validation values (as the dashboard folded them)."""
    out: dict[str, float] = {}
    loss = metrics.final_loss()
    if loss is not None:
        out["final/loss"] = loss
    for name, (_, values) in metrics.snapshot().validation.items():
        if len(values):
            out[f"final/val_{name}"] = float(values[-1])
    return out


def _plugin_summary(tag: str, data: plugin_data_pb2.HParamsPluginData) -> summary_pb2.Summary:
    summary = summary_pb2.Summary()
    summary.value.add(tag=tag, metadata=metadata.create_summary_metadata(data),
                      tensor=metadata.NULL_TENSOR)
    return summary


def hparams_records(name: str, hparams: Mapping[str, bool | float | str],
                    values: Mapping[str, float], state: RunState, started: float,
                    ended: float) -> list[bytes]:
    """The event file's records: its version, the session's start (hyperparameters), the
    final values, the session's end."""
    start = plugin_data_pb2.SessionStartInfo(group_name=name, start_time_secs=started)
    for key in sorted(hparams):
        value = hparams[key]
        if isinstance(value, bool):
            start.hparams[key].bool_value = value
        elif isinstance(value, float):
            start.hparams[key].number_value = value
        else:
            start.hparams[key].string_value = value
    end = plugin_data_pb2.SessionEndInfo(
        status=STATUS.get(state, api_pb2.STATUS_UNKNOWN), end_time_secs=ended)
    events = [event_pb2.Event(wall_time=started, file_version="brain.Event:2"),
              event_pb2.Event(wall_time=started, step=0, summary=_plugin_summary(
                  metadata.SESSION_START_INFO_TAG,
                  plugin_data_pb2.HParamsPluginData(session_start_info=start)))]
    for tag, value in sorted(values.items()):
        scalars = summary_pb2.Summary()
        scalars.value.add(tag=tag, simple_value=value)
        events.append(event_pb2.Event(wall_time=ended, step=0, summary=scalars))
    events.append(event_pb2.Event(wall_time=ended, step=0, summary=_plugin_summary(
        metadata.SESSION_END_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_end_info=end))))
    return [frame(e.SerializeToString()) for e in events]


def write_hparams(bundle: Bundle, metrics: LiveRun, state: RunState,
                  extra: Mapping[str, bool | float | str] | None = None,
                  values: Mapping[str, float] | None = None) -> Path:
    """Write (again: the folder holds one file, the latest) the run's HParams summary.
    `extra`: more hyperparameters (a trial's); `values`: more final values (its objective)."""
    folder = bundle.path / HPARAMS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    hparams = {**settings_of(bundle.plan.to_dict()), **(extra or {})}
    now = time.time()
    started = now - metrics.event_span()
    records = hparams_records(bundle.plan.run_name, hparams,
                              {**final_values(metrics), **(values or {})}, state, started, now)
    for old in folder.glob("events.out.tfevents.*"):
        old.unlink(missing_ok=True)
    path = folder / FILE_NAME.format(t=int(now), host=socket.gethostname())
    tmp = folder / ".hparams.tmp"
    with open(tmp, "wb") as f:
        f.write(b"".join(records))
    os.replace(tmp, path)
    return path
