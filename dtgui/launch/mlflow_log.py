"""Runs into MLflow, from whatever follows them (docs/mlflow.md).

`RunTracker` is fed by a run's `RunController` (the app, the headless watcher, `dtgui run`, a
sweep's queue): its curves as the run's `LiveRun` folded them (never the events again), every
few seconds the points new since the last write; at the end its state, error line and
artifacts. A sweep's `SweepTracker` is the parent run its trials are nested under.

Nothing here blocks the caller: every write is an operation queued to the `MlflowWriter` of
the tracking URI, one thread a URI, which imports MLflow (seconds) and writes in order. A
write that fails because the store does not answer stays first in the queue and is tried
again (1 s, 2 s, ... up to 30 s apart); one the store refuses (a 4xx answer) is dropped and
said. While writes wait, the tracker's `note` says so, and the run's card shows it. At exit
the writers get DRAIN_SECONDS to send what is left.

The MLflow run is dtgui's run: it carries the tag `dtgui.run_id`, by which a reattach or a
second export finds it again (and its id is kept in the run record), and it goes on from the
steps already logged, so no point is written twice (dtgui.core.tracking.new_points).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dtgui.core.bundle import Bundle
from dtgui.core.live_run import LiveRun
from dtgui.core.run_state import RunState
from dtgui.core.runs import RunRecord
from dtgui.core.slurm import JOB_FILE
from dtgui.core.tracking import (
    EXPERIMENT,
    INSTALL_HINT,
    PARENT_TAG,
    POINTS_PER_FLUSH,
    RUN_ID_TAG,
    SWEEP_TAG,
    clean_key,
    metric_series,
    mlflow_installed,
    new_points,
    run_params,
    tracking_uri,
)
from dtgui.launch.targets import LOCAL_KIND, SSH_KIND
from dtgui.worker.layout import OUTPUT_DIR

log = logging.getLogger(__name__)
FLUSH_SECONDS = 15.0  # a running run's new points are written this often
DRAIN_SECONDS = 15.0  # at exit: what is left is sent for this long at most
STUCK_SECONDS = 3.0  # a write with no answer for this long: the card says writes wait
MAX_QUEUED = 200  # more waiting writes than this: new points wait in the curves instead
BATCH = 900  # MLflow takes up to 1,000 metrics, 100 params and 100 tags a log_batch
RETRY_MAX_SECONDS = 30.0
EXPORT_POINTS = 2000  # a past run's points a curve (evenly spaced, the last one always)
# a run's final state as MLflow says it
STATUS = {RunState.FINISHED: "FINISHED", RunState.FAILED: "FAILED", RunState.STOPPED: "KILLED"}
MODEL_DIR = f"{OUTPUT_DIR}/model"

Op = Callable[[Any], None]  # an operation on an MlflowClient


def _refused(exc: BaseException) -> bool:
    """The store answered and said no (a 4xx): trying again would give the same answer."""
    code = getattr(exc, "get_http_status_code", None)
    if callable(code):
        with contextlib.suppress(Exception):
            status = int(code())
            return 400 <= status < 500 and status != 429
    return False


class MlflowWriter:
    """The one thread that writes to one tracking URI, in order, retrying."""

    def __init__(self, uri: str, client_factory: Callable[[str], Any] | None = None) -> None:
        self.uri = uri
        self._factory = client_factory or _client
        self._ops: collections.deque[tuple[str, Op]] = collections.deque()
        self._cv = threading.Condition()
        self._busy = False
        self._busy_since = 0.0  # monotonic: when the write under way began
        self.failing_since: float | None = None  # monotonic: the first failure of the head
        self.last_error = ""
        self.refused = 0  # writes the store refused (dropped)
        self.cpu_seconds = 0.0  # this thread's CPU time writing (what logging costs)
        self._thread = threading.Thread(target=self._loop, name="dtgui-mlflow", daemon=True)
        self._thread.start()

    def submit(self, what: str, op: Op) -> None:
        with self._cv:
            self._ops.append((what, op))
            self._cv.notify_all()

    @property
    def queued(self) -> int:
        with self._cv:
            return len(self._ops) + int(self._busy)

    def drain(self, timeout: float, *, while_answering: bool = False) -> bool:
        """Wait until every queued write is done (True) or `timeout` has passed; with
        `while_answering`, only while the store answers (at exit: a store that does not
        answer keeps nobody waiting)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while self._ops or self._busy:
                left = deadline - time.monotonic()
                if left <= 0 or (while_answering and self._stuck()):
                    return False
                self._cv.wait(min(left, 0.2))
        return True

    def _stuck(self) -> bool:
        """The head write failed, or has had no answer for STUCK_SECONDS (MLflow's own
        client retries a request several times before it gives up)."""
        return self.failing_since is not None or (
            self._busy and time.monotonic() - self._busy_since > STUCK_SECONDS)

    def discard(self) -> None:
        """Drop every queued write (a store given up on)."""
        with self._cv:
            self._ops.clear()
            self._cv.notify_all()

    def _loop(self) -> None:
        client = None
        delay = 1.0
        while True:
            with self._cv:
                while not self._ops:
                    self._cv.wait()
                what, op = self._ops[0]
                self._busy = True
                # importing MLflow first (seconds) is no wait on the store
                self._busy_since = time.monotonic() if client is not None else float("inf")
            cpu = time.thread_time()
            try:
                if client is None:
                    client = self._factory(self.uri)  # imports MLflow: not a wait on the store
                    with self._cv:
                        self._busy_since = time.monotonic()
                op(client)
            except Exception as exc:  # noqa: BLE001 - any failure is retried or said
                self.cpu_seconds += time.thread_time() - cpu
                message = f"{what}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                if client is not None and _refused(exc):
                    log.warning("MLflow refused %s", message)
                    with self._cv:
                        self._ops.popleft()
                        self.refused += 1
                        self.last_error = message[:300]
                        self._busy = False
                        self._cv.notify_all()
                    continue
                log.info("MLflow write failed (retrying): %s", message)
                with self._cv:
                    self._busy = False
                    if self.failing_since is None:
                        self.failing_since = time.monotonic()
                    self.last_error = message[:300]
                    self._cv.notify_all()
                time.sleep(delay)
                delay = min(RETRY_MAX_SECONDS, delay * 2)
                continue
            self.cpu_seconds += time.thread_time() - cpu
            delay = 1.0
            with self._cv:
                self._ops.popleft()
                self._busy = False
                self.failing_since = None
                self._cv.notify_all()

    def note(self) -> str:
        """What the card says: writes waiting on a store that does not answer, refusals."""
        with self._cv:
            waiting = len(self._ops)
            stuck = self._stuck()
            since = self.failing_since if self.failing_since is not None else self._busy_since
            refused, error = self.refused, self.last_error
        if stuck:
            seconds = time.monotonic() - since
            if self.failing_since is not None:
                return f"MLflow: {waiting} write(s) waiting, retrying for {seconds:.0f} s ({error})"
            return f"MLflow: {waiting} write(s) waiting, no answer for {seconds:.0f} s"
        if refused:
            return f"MLflow refused {refused} write(s): {error}"
        return ""


def _client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient  # seconds to import: on the writer's thread

    return MlflowClient(tracking_uri=uri)


_writers: dict[str, MlflowWriter] = {}
_writers_lock = threading.Lock()


def writer_for(uri: str) -> MlflowWriter:
    """The process's writer for `uri` (made the first time)."""
    with _writers_lock:
        found = _writers.get(uri)
        if found is None:
            if not _writers:
                atexit.register(drain_all)
            found = _writers[uri] = MlflowWriter(uri)
        return found


def drain_all(timeout: float = DRAIN_SECONDS, *, while_answering: bool = True) -> bool:
    """Send what is queued (at exit, and before a command ends): True when all was sent."""
    deadline = time.monotonic() + timeout
    with _writers_lock:
        writers = list(_writers.values())
    return all([w.drain(max(0.0, deadline - time.monotonic()), while_answering=while_answering)
                for w in writers])


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
    plan = bundle.plan
    tags = {"dtgui.run_name": plan.run_name, "dtgui.strategy": str(plan.strategy)}
    if record is not None:
        kinds = sorted({m.kind or (LOCAL_KIND if m.is_local else SSH_KIND) for m in record.machines})
        jobs = sorted({m.job_id for m in record.machines if m.job_id})
        if kinds:
            tags["dtgui.target"] = ",".join(kinds)
        if jobs:
            tags["dtgui.slurm_job"] = ",".join(jobs)
    return tags


def artifacts(bundle: Bundle) -> list[Path]:
    """The trained model, the plan, a Slurm job's batch script and the bundle's README."""
    root = bundle.path
    found = sorted((root / MODEL_DIR).glob("*.keras"))
    found += [p for p in (root / "plan.json", root / JOB_FILE, root / "README.md") if p.is_file()]
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
        series = metric_series(metrics.snapshot(), metrics.loss_curve())
        versions = metrics.versions()
        with self._lock:
            points = new_points(series, self.target.logged)
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

    def finish(self, metrics: LiveRun, state: RunState, message: str,
               per_flush: int = POINTS_PER_FLUSH) -> None:
        """The last points (thinned as the others: `per_flush` a curve), the final state with
        the error line, the artifacts."""
        status = STATUS.get(state)

        def end(client: Any) -> None:
            run_id = self.target.run_id
            series = metric_series(metrics.snapshot(), metrics.loss_curve())
            with self._lock:
                points = new_points(series, self.target.logged, per_flush=per_flush)
                versions = metrics.versions()
            _log_points(client, run_id, points, int(time.time() * 1000))
            if versions:
                _log_params(client, run_id, {f"version.{k}": v for k, v in versions.items()})
            tags = {"dtgui.state": str(state)}
            if message:
                tags["dtgui.message"] = message[:5000]
            if state is RunState.FAILED and message:
                tags["mlflow.note.content"] = message[:5000]
            _log_tags(client, run_id, tags)
            for path in artifacts(self.bundle):
                client.log_artifact(run_id, str(path))
            if status is not None:
                client.set_terminated(run_id, status=status)

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
        self.target = RunTarget(SWEEP_TAG, sweep_id, name, {"dtgui.sweep_name": name})

        def start(client: Any) -> None:
            self.target.resolve(client, writer.uri)
            _log_params(client, self.target.run_id, params)

        writer.submit("starting the sweep's MLflow run", start)

    def trial_started(self, tracker: RunTracker | None, number: int) -> None:
        if tracker is not None and tracker.writer is self.writer:
            tracker.set_parent(self.target, {"dtgui.trial": str(number)})

    def finish(self, best: float | None, failed: bool) -> None:
        def end(client: Any) -> None:
            if best is not None:
                _log_points(client, self.target.run_id, [("best_objective", 0, best)],
                            int(time.time() * 1000))
            client.set_terminated(self.target.run_id, status="FAILED" if failed else "FINISHED")

        self.writer.submit("ending the sweep's MLflow run", end)


def sweep_tracker(folder: Path, name: str, params: dict[str, str]) -> SweepTracker | None:
    uri = tracking_uri()
    if not uri or not mlflow_installed():
        if uri:
            _say_missing()
        return None
    return SweepTracker(writer_for(uri), str(folder.resolve()), name, params)


# -- past runs --------------------------------------------------------------------------------

class DirectWriter(MlflowWriter):
    """Writes at once on the caller's thread and raises what fails (an export: the person
    waits for it and reads why it failed)."""

    def __init__(self, uri: str) -> None:  # no thread
        self.uri = uri
        self.client = _client(uri)
        self.failing_since = None
        self.last_error = ""
        self.refused = 0

    def submit(self, what: str, op: Op) -> None:
        op(self.client)

    @property
    def queued(self) -> int:
        return 0

    def note(self) -> str:
        return ""


def send_past_run(record: RunRecord, uri: str) -> str:
    """Write a past run (its bundle read back) to MLflow at `uri`; the MLflow run's id. A
    second export of the same run updates that run: nothing is duplicated. Blocks; raises
    what MLflow raises."""
    from dtgui.launch.history import open_run

    view = open_run(record)
    tracker = RunTracker(DirectWriter(uri), view.bundle, record)
    tracker.begin()
    tracker.finish(view.metrics, record.state, record.message, per_flush=EXPORT_POINTS)
    if record.mlflow_run_id != tracker.target.run_id:  # begin() saved it (a record on disk)
        record.mlflow_run_id, record.mlflow_uri = tracker.target.run_id, uri
    return tracker.target.run_id
