"""Where runs are tracked (MLflow) and what of a run is sent there. Pure Python: no Qt, no
TensorFlow, and MLflow itself is not imported here (dtgui.launch.trackers.mlflow_writer does,
on its own thread).

Sending runs to MLflow is off unless asked for (docs/mlflow.md), in this order:

1. `--mlflow URI` on the command line (`--mlflow off` turns it off), which sets DTGUI_MLFLOW
   so that the processes dtgui starts (a sweep's, the headless watcher) do the same;
2. the preference (the app's Preferences, `preferences.json` in dtgui's config folder):
   on or off, with a URI or none;
3. MLFLOW_TRACKING_URI, MLflow's own way of saying where runs go.

On with no URI is the embedded store, `sqlite:///<dtgui's data folder>/mlflow.db`; a URI
(`http://mlflow.example:5000`, `databricks`, another SQLite file) names a team's server.
A run keeps the URI it was started with in its record: reattaching continues it there.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dtgui.core.live_run import Snapshot
from dtgui.core.plans.plan import Plan
from dtgui.core.series import Curve
from dtgui.core.settings import data_dir, load_preferences, save_preferences

ENV = "DTGUI_MLFLOW"  # set by --mlflow for the processes dtgui starts
MLFLOW_ENV = "MLFLOW_TRACKING_URI"
OFF = "off"
DEFAULT = "default"  # --mlflow default: the embedded store
PREFERENCE = "mlflow"  # preferences.json: {"mlflow": {"enabled": bool, "uri": str}}
EXPERIMENT = "dtgui"  # the experiment dtgui's runs go to
INSTALL_HINT = ("MLflow is not installed in dtgui's Python: `pip install 'dtgui[mlflow]'` "
                "(or `pip install mlflow-skinny sqlalchemy alembic`), then restart dtgui.")
# tags: dtgui's own identity of a run, which a second export or a reattach finds it by
RUN_ID_TAG = "dtgui.run_id"
SWEEP_TAG = "dtgui.sweep"
PARENT_TAG = "mlflow.parentRunId"
PARAM_MAX = 6000  # MLflow refuses longer parameter values
# a metric's points in MLflow at most, as TensorBoard keeps (its scalars' reservoir): every
# step of a short run, while a million steps of 16 replicas must not become 17 million rows
POINTS_PER_CURVE = 1000


def embedded_uri() -> str:
    return f"sqlite:///{data_dir() / 'mlflow.db'}"


def mlflow_installed() -> bool:
    """Whether MLflow can be imported (without importing it: that takes seconds)."""
    return importlib.util.find_spec("mlflow") is not None


@dataclass(frozen=True)
class TrackingPreference:
    enabled: bool | None = None  # None: not set (MLFLOW_TRACKING_URI decides)
    uri: str = ""  # "" = MLFLOW_TRACKING_URI, else the embedded store

    @classmethod
    def load(cls) -> TrackingPreference:
        data, _ = load_preferences()
        found = (data or {}).get(PREFERENCE)
        if not isinstance(found, dict):
            return cls()
        enabled = found.get("enabled")
        return cls(enabled if isinstance(enabled, bool) else None, str(found.get("uri", "")))

    def save(self) -> None:
        data, _ = load_preferences()
        data = dict(data or {})
        data[PREFERENCE] = {"enabled": self.enabled, "uri": self.uri}
        save_preferences(data)


def use_from_command_line(value: str) -> None:
    """`--mlflow URI|default|off`: for this process and the ones it starts."""
    os.environ[ENV] = value.strip() or DEFAULT


def tracking_uri(environ: Mapping[str, str] | None = None,
                 preference: TrackingPreference | None = None) -> str:
    """The tracking URI new runs are sent to; "" when sending is off (the module doc)."""
    env = os.environ if environ is None else environ
    given = env.get(ENV, "").strip()
    if given:
        return "" if given == OFF else embedded_uri() if given == DEFAULT else given
    pref = TrackingPreference.load() if preference is None else preference
    if pref.enabled is False:
        return ""
    if pref.enabled:
        return pref.uri.strip() or env.get(MLFLOW_ENV, "").strip() or embedded_uri()
    return env.get(MLFLOW_ENV, "").strip()


# -- what is logged ---------------------------------------------------------------------------

def _flat(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, (list, tuple)):
        out[prefix] = " ".join(str(v) for v in value)[:PARAM_MAX]
    else:
        out[prefix] = str(value)[:PARAM_MAX]


def run_params(plan: Plan, versions: Mapping[str, str] | None = None) -> dict[str, str]:
    """The plan's settings (the model's by `model.*`), replicas, machines and the training
    program's versions. The placement (tasks, cluster, machine entries) is summed up."""
    data = plan.to_dict()
    for name in ("schema", "tasks", "cluster", "machines", "run_name"):
        data.pop(name, None)
    out: dict[str, str] = {}
    _flat("", data, out)
    script = plan.script
    if script is not None:
        out["script"] = script.entry
        out["script.args"] = " ".join(script.args)[:PARAM_MAX]
        out.pop("model.args", None)
    out["tasks"] = str(len(plan.tasks))
    out["replicas"] = str(plan.total_replicas)
    out["machines"] = " ".join(plan.machine_names)[:PARAM_MAX]
    for name, version in (versions or {}).items():
        out[f"version.{name}"] = str(version)[:PARAM_MAX]
    return {k: v for k, v in out.items() if k}


def clean_key(key: str) -> str:
    """A metric or parameter name MLflow accepts (letters, digits, _ - . / and spaces)."""
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in key)


def new_points(series: Mapping[str, tuple[np.ndarray, np.ndarray]], logged: dict[str, float],
               total_steps: int = 0, *, final: bool = False,
               budget: int = POINTS_PER_CURVE) -> list[tuple[str, int, float]]:
    """(key, step, value) of each series' points after the step logged last; `logged` is
    moved on. A curve is cut into `budget` equal stretches of the run's planned
    `total_steps` and sends the first point of each: every step of a run of up to `budget`
    steps, `budget` points of a longer one, however often it is called. `final` adds the
    newest point (where the run ended). A curve longer than planned (a script's run of
    unknown length, a time series) doubles its stretches as it grows: `budget / 2` more
    points each time its length doubles (about 6,000 for a million steps).

    Points at or before a series' last logged step are never sent again: a run restarted
    from a checkpoint trains those steps again, and MLflow keeps every point it was given, so
    its curve keeps the first pass there and continues after it (no point twice)."""
    out: list[tuple[str, int, float]] = []
    for key, (xs, ys) in series.items():
        if not len(xs):
            continue
        steps = np.asarray(xs, dtype=np.float64)
        values = np.asarray(ys, dtype=np.float64)
        after = logged.get(key, float("-inf"))
        fresh = np.flatnonzero((steps > after) & np.isfinite(values))
        if not len(fresh):
            continue
        stride = _stride(total_steps, float(steps[fresh[-1]]), budget)
        stretch = np.floor(steps[fresh] / stride)
        first = np.flatnonzero(np.diff(stretch, prepend=math.floor(after / stride)
                                       if after > float("-inf") else -1.0) > 0)
        picked = fresh[first].tolist()
        if final and (not picked or picked[-1] != fresh[-1]):
            picked.append(int(fresh[-1]))
        # a series' steps only grow, except after a rewind, where they are at most `after`
        last = after
        for i in picked:
            step = int(steps[i])
            if step > last:
                out.append((key, step, float(values[i])))
                last = step
        logged[key] = max(after, last)
    return out


def _stride(total_steps: int, newest: float, budget: int) -> int:
    """The length of a curve's stretches (one point sent each). Past the planned length they
    are powers of two, so that a longer stretch holds whole shorter ones: what was sent
    before is a point of the new stretches too."""
    if newest <= total_steps:
        return max(1, math.ceil(total_steps / budget))
    return 1 << max(0, math.ceil(math.log2(newest / budget)))


def metric_series(snap: Snapshot, loss: Curve) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A run's curves as MLflow metrics, by step: the mean loss (`loss`), each replica's
    (`loss/replica_N`), validation (`val_NAME`), the learning rate (`lr`), each task's
    throughput (`examples_per_sec/TASK`), the split's shares (`split/PART/TASK`, at the step
    measured) and each machine's devices (`system/DEVICE/util`, `system/DEVICE/mem_mb`:
    their step is the second since the run's first event)."""
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if len(loss):
        out["loss"] = (loss.steps, loss.values)
    for rid, view in snap.replica_loss.items():
        out[f"loss/replica_{rid}"] = view
    for name, view in snap.validation.items():
        out[clean_key(f"val_{name}")] = view
    if len(snap.learning_rate[0]):
        out["lr"] = snap.learning_rate
    for task, view in snap.throughput.items():
        out[clean_key(f"examples_per_sec/{task.replace(':', '-')}")] = view
    for task, split in snap.splits.items():
        for part, share in split.shares().items():
            key = clean_key(f"split/{part}/{task.replace(':', '-')}")
            out[key] = (np.array([split.step], dtype=np.float64), np.array([share]))
    for label, view in snap.device_util.items():
        out[clean_key(f"system/{label.replace(':', '-')}/util")] = view
    for label, view in snap.device_mem.items():
        out[clean_key(f"system/{label.replace(':', '-')}/mem_mb")] = view
    return out
