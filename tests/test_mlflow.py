"""Runs into MLflow and TensorBoard's HParams, read back with their own readers: MLflow's client
on a SQLite store and through a real `mlflow server`, TensorBoard's event reader. The runs
are the bundle's real supervisor over the stub training child (tests/stub_task.py): what is
tested is what follows the run, not TensorFlow."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes import wait_for

from dtgui.cli.main import main
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.records import RunRecord
from dtgui.core.runs.run_state import RunState
from dtgui.core.sweeps.sweep import SweepSpec, parse_param
from dtgui.core.tracking import ENV, RUN_ID_TAG, SWEEP_TAG, new_points
from dtgui.launch.controller import RunController
from dtgui.launch.drivers import local_target
from dtgui.launch.gpus.free_slots import Slot
from dtgui.launch.run_admin import set_notes
from dtgui.launch.start.pipeline import launch_plan, reattach
from dtgui.launch.sweeps.sweep_queue import SweepQueue
from dtgui.launch.trackers import local_server, mlflow_runs, mlflow_writer
from dtgui.launch.trackers.mlflow_ui import (
    TRAINING_VIEW,
    mlflow_page,
    overview_page,
    start_ui,
    ui_program,
)
from dtgui.launch.trackers.tensorboard_server import start_tensorboard, stop_tensorboard
from dtgui.worker.machine_probe import choose_free_ports

mlflow = pytest.importorskip("mlflow")
from mlflow.tracking import MlflowClient  # noqa: E402


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite store for the module (making MLflow's tables takes seconds)."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    MlflowClient(uri).search_experiments()
    return uri


@pytest.fixture(scope="module")
def server_process(store: str) -> Iterator[Future[str]]:
    """MLflow's UI over the module's store, started as "Open in MLflow" starts it (the full
    mlflow of `packaging/dev.sh`), which serves as a team's server too; started with the
    module's first test so that its start (seconds of imports) overlaps that test; `server`
    waits until it answers."""
    assert ui_program() is not None, "no MLflow UI: `bash packaging/dev.sh test` installs it"
    with ThreadPoolExecutor(1) as pool:
        started = pool.submit(start_ui, store)
        try:
            yield started
        finally:
            started.exception()
            local_server.stop_servers()


@pytest.fixture
def server(server_process: Future[str]) -> str:
    return server_process.result().rstrip("/")


def _launch(plan: Plan, root: Path, python: str) -> RunController:
    return launch_plan(plan, root, targets=[local_target(python)])


def _steps(client: MlflowClient, run_id: str, key: str) -> list[int]:
    return [m.step for m in client.get_metric_history(run_id, key)]


def _runs(client: MlflowClient, tag: str, value: str) -> list[Any]:
    experiment = client.get_experiment_by_name("dtgui")
    assert experiment is not None
    return list(client.search_runs([experiment.experiment_id],
                                   filter_string=f"tags.`{tag}` = '{value}'"))


def test_new_points_never_send_a_step_twice_after_a_rewind() -> None:
    logged: dict[str, float] = {}
    steps = np.arange(1, 11, dtype=np.float64)
    first = new_points({"loss": (steps, steps * 0.1)}, logged, 600)
    assert [p[1] for p in first] == list(range(1, 11))
    # restarted from the checkpoint at step 5: steps 6.. trained again, then on to 15
    again = np.arange(1, 16, dtype=np.float64)
    second = new_points({"loss": (again, again * 0.2)}, logged, 600)
    assert [p[1] for p in second] == list(range(11, 16))


def _sent_in_flushes(total: int, flushes: int, planned: int, *, final: bool = True) -> list[int]:
    """The steps of one curve sent when a run of `total` steps is flushed `flushes` times."""
    logged: dict[str, float] = {}
    sent: list[int] = []
    ends = np.linspace(0, total, flushes + 1).round().astype(int)[1:]
    for i, end in enumerate(ends):
        steps = np.arange(1, end + 1, dtype=np.float64)
        last = final and i == len(ends) - 1
        sent += [p[1] for p in new_points({"loss": (steps, steps)}, logged, planned, final=last)]
    return sent


def test_a_curve_is_every_step_of_a_short_run_and_a_thousand_points_of_a_long_one() -> None:
    # a 600-step run flushed every few seconds: every step, each once
    assert _sent_in_flushes(600, 7, planned=600) == list(range(1, 601))
    # a million steps flushed 60 times: at most a thousand points, evenly spread, the end kept
    long = _sent_in_flushes(1_000_000, 60, planned=1_000_000)
    assert 990 <= len(long) <= 1001 and long == sorted(set(long)) and long[-1] == 1_000_000
    assert max(np.diff(long)) <= 1000 + 1
    # a run whose length is not known (a script's): still bounded, a few thousand points
    unknown = _sent_in_flushes(1_000_000, 60, planned=0)
    assert len(unknown) < 10_000 and unknown == sorted(set(unknown))


@pytest.mark.slow
def test_a_run_reaches_mlflow_live_and_an_export_adds_nothing_twice(
        tmp_path: Path, store: str, stub_python: Callable[..., str],
        monkeypatch: pytest.MonkeyPatch,
        server_process: Future[str]) -> None:
    """Params, tags, metrics by step, the final state and artifacts, read back by MLflow's
    own client; the run's HParams summary by TensorBoard's reader; then detach and reattach
    continue the same MLflow run, and `dtgui runs export-mlflow` updates it, never twice."""
    monkeypatch.setenv(ENV, store)
    monkeypatch.setattr(mlflow_runs, "FLUSH_SECONDS", 0.2)
    plan = Plan(run_name="tracked", strategy=Strategy.MIRRORED, replicas_per_task=2,
                steps=400, checkpoint_every=0)
    controller = _launch(plan, tmp_path / "runs", stub_python(step_seconds=0.01))
    record = controller.record
    assert record is not None and record.mlflow_uri == store
    client = MlflowClient(store)
    wait_for(lambda: record.mlflow_run_id and client.get_metric_history(
        record.mlflow_run_id, "loss"), 120, "no loss reached MLflow while the run trained")
    run_id = record.mlflow_run_id
    controller.detach()  # dtgui closed with the run training ...
    again = reattach(RunRecord.load(Path(record.bundle)))  # ... and opened again
    assert again.wait(120) and again.state is RunState.FINISHED
    assert mlflow_writer.drain_all(120, while_answering=False)

    assert RunRecord.load(Path(record.bundle)).mlflow_run_id == run_id
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags[RUN_ID_TAG] == record.run_id
    assert run.data.tags["dtgui.strategy"] == "mirrored"
    assert run.data.tags["mlflow.runName"] == "tracked"
    params = run.data.params
    assert params["strategy"] == "mirrored" and params["replicas"] == "2"
    assert params["steps"] == "400" and params["version.python"]
    loss = _steps(client, run_id, "loss")
    assert loss == list(range(1, 401)), loss[-5:]  # every step of a short run, none twice
    for replica in (0, 1):
        steps = _steps(client, run_id, f"loss/replica_{replica}")
        assert steps == sorted(set(steps)) and steps[-1] == 400
    assert {"plan.json", "README.md"} <= {a.path for a in client.list_artifacts(run_id)}
    assert len(_runs(client, RUN_ID_TAG, record.run_id)) == 1  # the reattach went on in it

    # exported again, after the Runs page's tags and note were written: the same run, the
    # same points, the tags and note as MLflow tags, and its own start and end times (not
    # the export's)
    set_notes(record.bundle, tags=["baseline", "lr x2"], note="stopped then resumed")
    assert main(["runs", "export-mlflow", record.bundle, "--tracking-uri", store]) == 0
    assert len(_runs(client, RUN_ID_TAG, record.run_id)) == 1
    assert _steps(client, run_id, "loss") == loss
    exported = client.get_run(run_id)
    assert exported.info.status == "FINISHED"
    tags = exported.data.tags
    assert tags["dtgui.tags"] == "baseline, lr x2" and tags["baseline"] == "yes"
    assert tags["lr x2"] == "yes" and tags["mlflow.note.content"] == "stopped then resumed"
    ended = RunRecord.load(Path(record.bundle))
    assert ended.ended is not None
    assert exported.info.start_time == int(ended.created * 1000)
    assert exported.info.end_time == int(ended.ended * 1000)

    # "Open in MLflow": MLflow's UI started on the store (SQLite here), at the run; the
    # toolbar's at dtgui's experiment, the same server
    url = mlflow_page(Path(record.bundle))
    base = url.partition("#")[0]
    ours = client.get_experiment_by_name("dtgui")
    assert ours is not None and base.startswith("http://127.0.0.1:")
    assert url == (f"{base}#/experiments/{ours.experiment_id}/runs/{run_id}/model-metrics"
                   f"?{TRAINING_VIEW}")  # its charts
    assert _get(f"{base}ajax-api/2.0/mlflow/runs/get?run_id={run_id}")[
        "run"]["info"]["run_name"] == "tracked"
    assert mlflow_page() == f"{base}#/experiments/{ours.experiment_id}/runs?{TRAINING_VIEW}"
    toolbar = overview_page()  # sending is on and the run is there: nothing to say of it
    assert toolbar.url == mlflow_page() and "not sent" not in toolbar.note
    assert record.run_id not in {r.run_id for r in toolbar.unsent}
    assert base == server_process.result()  # one UI a store, reused

    # TensorBoard itself (the toolbar's "TensorBoard": a real server on a free port, on
    # every run dtgui lists: this one is outside the runs folder) lists the run's HParams
    # session: its settings, final loss and status
    board = start_tensorboard()
    try:
        wait_for(lambda: _hparams(board.url, "experiment").get("hparamInfos"), 120,
                 "TensorBoard shows no HParams", interval=0.5)
        experiment = _hparams(board.url, "experiment")
        names = {h["name"] for h in experiment["hparamInfos"]}
        assert {"strategy", "steps", "learning_rate"} <= names
        assert "final/loss" in {m["name"]["tag"] for m in experiment["metricInfos"]}
        groups = _hparams(board.url, "session_groups", {
            "startIndex": 0, "sliceSize": 10, "colParams": [],
            "allowedStatuses": ["STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_UNKNOWN"]})
        (group,) = groups["sessionGroups"]
        assert group["hparams"]["strategy"] == "mirrored" and group["hparams"]["steps"] == 400
        (session,) = group["sessions"]
        assert session["status"] == "STATUS_SUCCESS"
        final = {m["name"]["tag"]: m["value"] for m in session["metricValues"]}["final/loss"]
        assert final == pytest.approx(again.final_loss, rel=1e-5)
    finally:
        stop_tensorboard()
    assert board.process.poll() is not None  # stopped (as at dtgui's exit)


def _get(url: str) -> dict[str, Any]:
    import json
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as reply:
        found: dict[str, Any] = json.loads(reply.read())
        return found


def _hparams(url: str, what: str, request: dict[str, Any] | None = None) -> dict[str, Any]:
    import json
    import urllib.request

    body = json.dumps(request or {"experimentName": ""}).encode()
    ask = urllib.request.Request(f"{url}data/plugin/hparams/{what}", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(ask, timeout=30) as reply:
        found: dict[str, Any] = json.loads(reply.read())
        return found


def test_an_unreachable_server_neither_stops_nor_holds_a_run_and_its_card_says_so(
        tmp_path: Path, stub_python: Callable[..., str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    nobody = f"http://127.0.0.1:{choose_free_ports(1)[0]}"  # nothing listens there
    monkeypatch.setenv(ENV, nobody)
    monkeypatch.setattr(mlflow_writer, "STUCK_SECONDS", 0.3)
    plan = Plan(run_name="offline", strategy=Strategy.ONE_DEVICE, replicas_per_task=1,
                steps=150, checkpoint_every=0)
    controller = _launch(plan, tmp_path / "runs", stub_python(step_seconds=0.02))
    said: list[str] = []
    while not controller.finished:
        if "MLflow" in controller.message:
            said.append(controller.message)
        controller.wait(0.1)
    writer = mlflow_writer.writer_for(nobody)
    try:
        assert controller.state is RunState.FINISHED, controller.message
        assert said and "write(s) waiting" in said[-1], said
        assert writer.queued > 0  # the run ended while its writes still waited
        assert RunRecord.load(controller.bundle.path).state is RunState.FINISHED
    finally:
        writer.discard()


@pytest.mark.slow
def test_a_sweep_is_a_parent_run_with_its_trials_nested_on_a_server(
        tmp_path: Path, server: str, stub_python: Callable[..., str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Through a real `mlflow server`: the sweep's run, each trial's run under it with the
    trial's values as params, its objective as a metric and how it ended (one failed)."""
    monkeypatch.setenv(ENV, server)
    good, bad = stub_python(), stub_python(fail="worker:0=the data ran out")
    plan = Plan(run_name="swept", strategy=Strategy.ONE_DEVICE, replicas_per_task=1, steps=6,
                checkpoint_every=0)

    def launch(trial_plan: Plan, root: Path, **kwargs: Any) -> Any:
        python = bad if trial_plan.run_name.endswith("t001") else good
        return launch_plan(trial_plan, root, **{**kwargs, "targets": [local_target(python)]})

    spec = SweepSpec(params=(parse_param("lr=loguniform:1e-4:1e-1"),), trials=2, parallel=2,
                     search="random", objective="loss", pruner="none")
    rows = SweepQueue.new(tmp_path / "s", spec, plan, slots=[Slot("a"), Slot("b")],
                          launch=launch).run()
    assert mlflow_writer.drain_all(120, while_answering=False)
    client = MlflowClient(server)
    parents = _runs(client, SWEEP_TAG, str((tmp_path / "s").resolve()))
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    parent = parents[0]
    assert parent.data.params["param.lr"].startswith("loguniform")
    trials = _runs(client, "mlflow.parentRunId", parent.info.run_id)
    assert len(trials) == 2
    # the sweep's run spans its trials' (its times are when they happened, not when written)
    assert parent.info.start_time <= min(t.info.start_time for t in trials)
    assert parent.info.end_time >= max(t.info.end_time for t in trials)
    by_number = {int(t.data.tags["dtgui.trial"]): t for t in trials}
    for row in rows:
        trial = by_number[row.number]
        assert float(trial.data.params["trial.lr"]) == pytest.approx(row.params["lr"])
        if row.state == "failed":
            assert trial.data.tags["dtgui.trial_state"] == "failed"
            assert trial.info.status == "FAILED"
            assert "the data ran out" in trial.data.tags["dtgui.message"]
        else:
            assert trial.data.tags["dtgui.trial_state"] == "complete"
            assert trial.data.metrics["objective_loss"] == pytest.approx(row.objective)
    assert parent.data.metrics["best_objective"] == pytest.approx(
        min(r.objective for r in rows if r.objective is not None))

    # "Open in MLflow" on the sweep: the team's server itself, at the sweep's trials (its
    # filter is MLflow's own search)
    url = mlflow_page(tmp_path / "s")
    experiment = client.get_experiment_by_name("dtgui")
    assert experiment is not None
    page = f"{server}/#/experiments/{experiment.experiment_id}/runs?searchFilter="
    assert url.startswith(page) and url.endswith(f"&{TRAINING_VIEW}")
    where = urllib.parse.unquote(url.removeprefix(page).removesuffix(f"&{TRAINING_VIEW}"))
    assert {r.info.run_id for r in client.search_runs([experiment.experiment_id], where)} \
        == {t.info.run_id for t in trials}

    # the toolbar's TensorBoard: the sweep's trials among every run, in HParams
    board = start_tensorboard()
    try:
        def groups() -> list[Any]:
            found: list[Any] = _hparams(board.url, "session_groups", {
                "startIndex": 0, "sliceSize": 10, "colParams": [],
                "allowedStatuses": ["STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_UNKNOWN"]}).get(
                    "sessionGroups", [])
            return found

        wait_for(lambda: len(groups()) == 2, 120, "TensorBoard shows not both trials in HParams",
                 interval=0.5)
        assert sorted(g["hparams"]["learning_rate"] for g in groups()) == pytest.approx(
            sorted(r.params["lr"] for r in rows))
    finally:
        stop_tensorboard()
