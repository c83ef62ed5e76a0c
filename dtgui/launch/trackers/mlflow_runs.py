"""Runs into MLflow, from whatever follows them (docs/mlflow.md).

`RunTracker` is fed by a run's `RunController` (the app, the headless watcher, `dtgui run`, a
sweep's queue): its curves as the run's `LiveRun` folded them (never the events again), every
few seconds the points new since the last write; at the end its state, error line and
artifacts. A sweep's `SweepTracker` is the parent run its trials are nested under.

Nothing here blocks the caller: every write is an operation queued to the tracking URI's
writer thread (`dtgui.launch.trackers.mlflow_writer`, which also says when writes wait).

The MLflow run is dtgui's run: it carries the tag `dtgui.run_id`, by which a reattach or a
second export finds it again (and its id is kept in the run record), and it goes on from the
steps already logged, so no point is written twice (dtgui.core.tracking.new_points).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.live_run import LiveRun
from dtgui.core.runs.records import RunRecord
from dtgui.core.runs.run_index import Notes
from dtgui.core.runs.run_state import RunState
from dtgui.core.tracking import (
    EXPERIMENT,
    INSTALL_HINT,
    PARENT_TAG,
    RUN_ID_TAG,
    SWEEP_TAG,
    clean_key,
    metric_series,
    mlflow_installed,
    new_points,
    run_params,
    tracking_uri,
)
from dtgui.launch.drivers import DRIVERS, recorded_kind
from dtgui.launch.trackers.mlflow_writer import DirectWriter, MlflowWriter, writer_for
from dtgui.worker.layout import OUTPUT_DIR

log = logging.getLogger(__name__)
FLUSH_SECONDS = 15.0  # a running run's new points are written this often
MAX_QUEUED = 200  # more waiting writes than this: new points wait in the curves instead
BATCH = 900  # MLflow takes up to 1,000 metrics, 100 params and 100 tags a log_batch
# a run's final state as MLflow says it
STATUS = {RunState.FINISHED: "FINISHED", RunState.FAILED: "FAILED", RunState.STOPPED: "KILLED",
          RunState.LOST: "KILLED"}
MODEL_DIR = f"{OUTPUT_DIR}/model"
NOTE_TAG = "mlflow.note.content"  # the run's description in MLflow's UI


# -- the operations (run on the writer's thread, or directly by an export) ------------------

def experiment_id(client: Any, uri: str) -> str:
    """dtgui's experiment; its artifacts beside a SQLite store's file (MLflow's default is
    the working directory, which for the app is anywhere)."""
    found = client.get_experiment_by_name(EXPERIMENT)
    if found is not None:
        return str(found.experiment_id)
    location = None
    if uri.startswith("sqlite:///"):
        location = (Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts").as_uri()
    # a model-training experiment: MLflow's UI shows its runs' charts, not GenAI's views
    return str(client.create_experiment(EXPERIMENT, artifact_location=location, tags={
        "mlflow.experimentKind": "custom_model_development"}))


def find_run(client: Any, experiment: str, tag: str, value: str) -> Any | None:
    quoted = value.replace("'", "\\'")
    found = client.search_runs([experiment], filter_string=f"tags.`{tag}` = '{quoted}'",
                               max_results=1)
    return found[0] if found else None


def logged_steps(client: Any, run: Any) -> dict[str, float]:
    """The last step of each metric a run already has (where a continued run goes on)."""
    out: dict[str, float] = {}
    for key in run.data.metrics:
        history = client.get_metric_history(run.info.run_id, key)
        if history:
            out[key] = float(max(m.step for m in history))
    return out


def _batches(items: list[Any], size: int) -> Iterable[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i: i + size]


@dataclass
class RunTarget:
    """The MLflow run a tracker writes to (filled on the writer's thread)."""

    key_tag: str  # RUN_ID_TAG or SWEEP_TAG
    key: str
    name: str
    tags: dict[str, str] = field(default_factory=dict)
    run_id: str = ""
    started_ms: int | None = None  # when dtgui's run started (None: when MLflow's is made)
    logged: dict[str, float] = field(default_factory=dict)
    ready: threading.Event = field(default_factory=threading.Event)

    def resolve(self, client: Any, uri: str, known_id: str = "") -> None:
        """Find dtgui's run (by its id kept, else by its tag) or start it."""
        if self.run_id:
            return
        experiment = experiment_id(client, uri)
        run = None
        if known_id:
            with contextlib.suppress(Exception):
                run = client.get_run(known_id)
        if run is None or run.info.lifecycle_stage != "active":
            run = find_run(client, experiment, self.key_tag, self.key)
        if run is None:
            run = client.create_run(experiment, run_name=self.name, start_time=self.started_ms,
                                    tags={self.key_tag: self.key, **self.tags})
        else:
            self.logged.update(logged_steps(client, run))
            if run.info.status != "RUNNING":
                client.update_run(run.info.run_id, status="RUNNING")
        self.run_id = str(run.info.run_id)
        self.ready.set()


def _log_params(client: Any, run_id: str, params: dict[str, str]) -> None:
    from mlflow.entities import Param

    items = [Param(clean_key(k), v) for k, v in sorted(params.items())]
    for chunk in _batches(items, 100):
        client.log_batch(run_id, params=chunk)


def _log_tags(client: Any, run_id: str, tags: dict[str, str]) -> None:
    from mlflow.entities import RunTag

    items = [RunTag(k, v) for k, v in sorted(tags.items())]
    for chunk in _batches(items, 100):
        client.log_batch(run_id, tags=chunk)


def _log_points(client: Any, run_id: str, points: list[tuple[str, int, float]],
                at_ms: int) -> None:
    from mlflow.entities import Metric

    metrics = [Metric(key, value, at_ms, step) for key, step, value in points]
    for chunk in _batches(metrics, BATCH):
        client.log_batch(run_id, metrics=chunk)


def run_tags(bundle: Bundle, record: RunRecord | None) -> dict[str, str]:
    """What MLflow shows of the run beside its curves: its name, strategy, kinds, and the tags
    and note written on the Runs page (as they are when the run is sent)."""
    plan = bundle.plan
    tags = {"dtgui.run_name": plan.run_name, "dtgui.strategy": str(plan.strategy)}
    notes = Notes.read(bundle.path)
    if notes.tags:
        tags["dtgui.tags"] = ", ".join(notes.tags)
        # each also as a tag of its own: MLflow's search finds `tags.baseline = 'yes'`
        tags.update({clean_key(t): "yes" for t in notes.tags})
    if notes.note:
        tags[NOTE_TAG] = notes.note[:5000]
    if record is not None:
        kinds = sorted({recorded_kind(m) for m in record.machines})
        if kinds:
            tags["dtgui.target"] = ",".join(kinds)
        for kind in kinds:
            if kind in DRIVERS:
                tags.update(DRIVERS[kind].tracking_tags(record))
    return tags


def artifacts(bundle: Bundle, record: RunRecord | None = None) -> list[Path]:
    """The trained model, the plan, the bundle's README and what the run's kinds keep (a
    cluster's batch script)."""
    root = bundle.path
    found = sorted((root / MODEL_DIR).glob("*.keras"))
    found += [p for p in (root / "plan.json", root / "README.md") if p.is_file()]
    kinds = {recorded_kind(m) for m in record.machines} if record is not None else set()
    found += [p for kind in sorted(kinds) if kind in DRIVERS
              for p in DRIVERS[kind].tracking_files(root) if p.is_file()]
    return found


# -- a run ------------------------------------------------------------------------------------

class RunTracker:
    """One dtgui run as one MLflow run (the module doc)."""

    def __init__(self, writer: MlflowWriter, bundle: Bundle, record: RunRecord | None) -> None:
        self.writer = writer
        self.bundle = bundle
        self.record = record
        run_id = record.run_id if record is not None else bundle.path.name
        self.target = RunTarget(RUN_ID_TAG, run_id, bundle.plan.run_name,
                                run_tags(bundle, record))
        if record is not None and record.created:
            self.target.started_ms = int(record.created * 1000)
        self._flushed = float("-inf")
        self._versions_sent = False
        self._lock = threading.Lock()  # update() from the monitor, finish() from its end
        self.update_cpu_seconds = 0.0  # the follower's CPU time choosing points to send

    @property
    def note(self) -> str:
        return self.writer.note()

    def begin(self) -> None:
        """Find or start the MLflow run, then its parameters (queued)."""
        known = self.record.mlflow_run_id if self.record is not None else ""
        params = run_params(self.bundle.plan)

        def start(client: Any) -> None:
            self.target.resolve(client, self.writer.uri, known)
            _log_tags(client, self.target.run_id, self.target.tags)
            _log_params(client, self.target.run_id, params)
            if self.record is not None and self.record.mlflow_run_id != self.target.run_id:
                self.record.mlflow_run_id = self.target.run_id
                self.record.mlflow_uri = self.writer.uri
                with contextlib.suppress(OSError):
                    self.record.save()

        self.writer.submit("starting the MLflow run", start)

    def update(self, metrics: LiveRun, *, force: bool = False) -> None:
        """Queue the points new since the last write (at most every FLUSH_SECONDS)."""
        now = time.monotonic()
        if not force and now - self._flushed < FLUSH_SECONDS:
            return
        if not self.target.ready.is_set() or self.writer.queued > MAX_QUEUED:
            return  # they wait in the curves: nothing is lost, nothing piles up
        self._flushed = now
        cpu = time.thread_time()
        snap = metrics.snapshot()
        series = metric_series(snap, metrics.loss_curve())
        versions = metrics.versions()
        with self._lock:
            points = new_points(series, self.target.logged, snap.total_steps)
            if versions and not self._versions_sent:
                self._versions_sent = True
                params = {f"version.{k}": v for k, v in versions.items()}
                self.writer.submit("the versions", lambda c: _log_params(
                    c, self.target.run_id, params))
        if points:
            at = int(time.time() * 1000)
            self.writer.submit(f"{len(points)} metric point(s)", lambda c: _log_points(
                c, self.target.run_id, points, at))
        self.update_cpu_seconds += time.thread_time() - cpu

    def finish(self, metrics: LiveRun, state: RunState, message: str) -> None:
        """The last points (thinned as the others, the newest always), the final state with
        the error line, the artifacts."""
        status = STATUS.get(state)
        # when the run ended, not when this is written: a past run sent later, or a write
        # that waited, keeps its real duration
        ended = self.record.ended if self.record is not None and self.record.ended else None
        end_ms = int((ended or time.time()) * 1000)

        def end(client: Any) -> None:
            run_id = self.target.run_id
            snap = metrics.snapshot()
            series = metric_series(snap, metrics.loss_curve())
            with self._lock:
                points = new_points(series, self.target.logged, snap.total_steps, final=True)
                versions = metrics.versions()
            _log_points(client, run_id, points, int(time.time() * 1000))
            if versions:
                _log_params(client, run_id, {f"version.{k}": v for k, v in versions.items()})
            tags = {"dtgui.state": str(state)}
            if message:
                tags["dtgui.message"] = message[:5000]
            if state is RunState.FAILED and message:
                note = self.target.tags.get(NOTE_TAG, "")
                tags[NOTE_TAG] = (f"{note}\n\n{message}" if note else message)[:5000]
            _log_tags(client, run_id, tags)
            for path in artifacts(self.bundle, self.record):
                client.log_artifact(run_id, str(path))
            if status is not None:
                client.set_terminated(run_id, status=status, end_time=end_ms)

        self.writer.submit("ending the MLflow run", end)

    def close(self, metrics: LiveRun) -> None:
        """dtgui stops following (the run goes on): the points so far; the run stays open."""
        self.update(metrics, force=True)

    def set_parent(self, parent: RunTarget, tags: dict[str, str] | None = None) -> None:
        """Nest this run under a sweep's run."""
        extra = dict(tags or {})
        self.writer.submit("nesting the trial", lambda c: _log_tags(
            c, self.target.run_id, {PARENT_TAG: parent.run_id, **extra}))

    def log_trial(self, values: dict[str, Any], state: str, objective: str,
                  value: float | None) -> None:
        """A sweep trial's values (params `trial.NAME`), objective and how it ended."""
        params = {f"trial.{k}": str(v) for k, v in values.items()}

        def trial(client: Any) -> None:
            run_id = self.target.run_id
            _log_params(client, run_id, params)
            _log_tags(client, run_id, {"dtgui.trial_state": state})
            if value is not None:
                _log_points(client, run_id, [(clean_key(f"objective_{objective}"), 0, value)],
                            int(time.time() * 1000))

        self.writer.submit("the trial's values", trial)


def tracker_for(bundle: Bundle, record: RunRecord | None) -> RunTracker | None:
    """The run's tracker, or None when runs are not sent to MLflow (or it is not installed,
    which is said once in the log). A run keeps the URI it was started with."""
    uri = record.mlflow_uri if record is not None and record.mlflow_uri else tracking_uri()
    if not uri:
        return None
    if not mlflow_installed():
        _say_missing()
        return None
    return RunTracker(writer_for(uri), bundle, record)


_missing_said = threading.Event()


def _say_missing() -> None:
    if not _missing_said.is_set():
        _missing_said.set()
        log.warning("runs are to be sent to MLflow, but %s", INSTALL_HINT)


# -- a sweep ----------------------------------------------------------------------------------

class SweepTracker:
    """A sweep as a parent MLflow run; its trials' runs are nested under it."""

    def __init__(self, writer: MlflowWriter, sweep_id: str, name: str,
                 params: dict[str, str]) -> None:
        self.writer = writer
        self.target = RunTarget(SWEEP_TAG, sweep_id, name, {"dtgui.sweep_name": name},
                                started_ms=int(time.time() * 1000))  # before its trials
        def start(client: Any) -> None:
            self.target.resolve(client, writer.uri)
            _log_params(client, self.target.run_id, params)

        writer.submit("starting the sweep's MLflow run", start)

    def trial_started(self, tracker: RunTracker | None, number: int) -> None:
        if tracker is not None and tracker.writer is self.writer:
            tracker.set_parent(self.target, {"dtgui.trial": str(number)})

    def finish(self, best: float | None, failed: bool) -> None:
        end_ms = int(time.time() * 1000)  # now, not when the writer gets to it

        def end(client: Any) -> None:
            if best is not None:
                _log_points(client, self.target.run_id, [("best_objective", 0, best)],
                            int(time.time() * 1000))
            client.set_terminated(self.target.run_id, status="FAILED" if failed else "FINISHED",
                                  end_time=end_ms)

        self.writer.submit("ending the sweep's MLflow run", end)


def sweep_tracker(folder: Path, name: str, params: dict[str, str]) -> SweepTracker | None:
    uri = tracking_uri()
    if not uri or not mlflow_installed():
        if uri:
            _say_missing()
        return None
    return SweepTracker(writer_for(uri), str(folder.resolve()), name, params)


# -- past runs --------------------------------------------------------------------------------

def send_past_run(record: RunRecord, uri: str) -> str:
    """Write a past run (its bundle read back) to MLflow at `uri`; the MLflow run's id. A
    second export of the same run updates that run: nothing is duplicated. Blocks; raises
    what MLflow raises."""
    from dtgui.launch.runs.history import open_run

    view = open_run(record)
    tracker = RunTracker(DirectWriter(uri), view.bundle, record)
    tracker.begin()
    tracker.finish(view.metrics, record.state, record.message)
    if record.mlflow_run_id != tracker.target.run_id:  # begin() saved it (a record on disk)
        record.mlflow_run_id, record.mlflow_uri = tracker.target.run_id, uri
    return tracker.target.run_id
