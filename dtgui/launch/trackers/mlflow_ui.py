"""Open runs and sweeps in MLflow's UI (docs/mlflow.md).

A team's tracking server (an http(s) URI) is opened where it is. A store on this machine
(dtgui's own SQLite file, another SQLite file) gets MLflow's UI started on it here
(`mlflow server`, through `dtgui.launch.trackers.local_server`, as TensorBoard), one a store,
reused while it runs. The UI needs the full mlflow (Flask and the rest) while dtgui's venv has
the client only (mlflow-skinny: the full one would be imported into every training process by
Keras); `packaging/dev.sh` installs the full one in a venv of its own beside dtgui's
(`UI_VENV`), and where it is absent the message says the one command that installs it.

`mlflow_page(folder)` is the page of a run (its MLflow run's charts) or of a sweep (its
trials, nested under the sweep's run), a run never sent being sent first (as "Export to
MLflow"); with no folder, dtgui's experiment. Blocks (imports MLflow, starts a server):
off the UI thread.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dtgui.core.runs.records import RunHistory, RunRecord
from dtgui.core.settings import data_dir
from dtgui.core.sweeps.sweep import SWEEP_FILE, TRIALS_DIR
from dtgui.core.tracking import (
    EXPERIMENT,
    INSTALL_HINT,
    PARENT_TAG,
    SWEEP_TAG,
    embedded_uri,
    mlflow_installed,
    tracking_uri,
)
from dtgui.launch.trackers.local_server import ServerError, ServicePage, say_nothing, start_server

# MLflow's UI shows an experiment's model-training views (its runs, their charts), not its
# GenAI ones (traces), when asked so
TRAINING_VIEW = "workflowType=machine_learning"
UI_VENV = "mlflow-server"  # beside dtgui's venv's files (sys.prefix), as packaging/dev.sh makes it


def _ui_venv() -> Path:
    """Where the UI's venv is (or goes): in dtgui's venv when it can be written, else in
    dtgui's data folder."""
    beside = Path(sys.prefix) / UI_VENV
    if beside.exists() or os.access(sys.prefix, os.W_OK):
        return beside
    return data_dir() / UI_VENV


def ui_program() -> list[str] | None:
    """The command that runs the full mlflow (`mlflow server`), or None when there is none."""
    for venv in (Path(sys.prefix) / UI_VENV, data_dir() / UI_VENV):
        program = venv / "bin" / "mlflow"
        if program.is_file():
            return [str(program)]
    if importlib.util.find_spec("flask") is not None and mlflow_installed():
        return [sys.executable, "-m", "mlflow"]  # the full mlflow in dtgui's own Python
    return None


def install_command() -> str:
    """The one command that installs MLflow's UI where `ui_program` finds it, at the version
    of dtgui's client (the store's tables are that version's)."""
    try:
        version = importlib.metadata.version("mlflow-skinny")
    except importlib.metadata.PackageNotFoundError:
        version = ""
    venv = _ui_venv()
    wanted = f"mlflow=={version}" if version else "mlflow"
    return f"python3 -m venv {venv} && {venv}/bin/pip install '{wanted}'"


def start_ui(uri: str, say: Callable[[str], None] = say_nothing) -> str:
    """MLflow's UI on the store `uri` (a SQLite file here): its base URL, once it answers."""
    program = ui_program()
    if program is None:
        install = install_command()
        raise ServerError("MLflow's UI is not installed (dtgui's Python has MLflow's client "
                          f"only). This command installs it: {install}", install)
    store = Path(uri.removeprefix("sqlite:///"))
    store.parent.mkdir(parents=True, exist_ok=True)
    say("Starting MLflow's UI on this machine (its first start imports MLflow: up to a "
        "minute on a busy machine; then it is reused until dtgui quits)")
    # `mlflow ui` is an alias of `mlflow server`, and the artifacts' destination costs no
    # measurable time of the start (15-27 s either way here, the spread being the machine's
    # load): the start is MLflow's imports, twice (the command, then its uvicorn worker)
    command = [*program, "server", "--backend-store-uri", uri, "--host", "127.0.0.1",
               "--workers", "1", "--artifacts-destination", str(store.parent / "mlartifacts")]
    server = start_server(f"mlflow-{uri}", command, lambda p: ["--port", str(p)],
                          name="MLflow's UI", ready_path="/health", cwd=store.parent,
                          # its job runner (a pool of processes, each importing mlflow, for
                          # MLflow's own server-side jobs, which tracking never asks for)
                          # doubled the start's CPU: 41 s against 20 s (docs/testing.md)
                          env={"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    return server.url


def ui_base(uri: str, say: Callable[[str], None] = say_nothing) -> str:
    """Where the UI of the store `uri` is: a team's server itself, or one started here."""
    if uri.startswith(("http://", "https://")):
        return uri.rstrip("/") + "/"
    if uri.startswith("sqlite:///"):
        return start_ui(uri, say)
    raise ServerError(f"Runs go to {uri}: open them in that MLflow's own UI.")


def mlflow_page(folder: Path | None = None, say: Callable[[str], None] = say_nothing) -> str:
    """The URL of a run's or a sweep's page in MLflow's UI (None: dtgui's experiment),
    its UI started when it is on this machine; `say` is told each step."""
    if not mlflow_installed():
        raise ServerError(INSTALL_HINT)
    say("Loading MLflow's client")
    from mlflow.tracking import MlflowClient  # seconds to import: off the UI thread

    if folder is not None and (folder / SWEEP_FILE).is_file():
        return _sweep_page(folder, say)
    if folder is None:
        uri = tracking_uri() or embedded_uri()
        base = ui_base(uri, say)
        found = MlflowClient(tracking_uri=uri).get_experiment_by_name(EXPERIMENT)
        return base + (f"#/experiments/{found.experiment_id}/runs?{TRAINING_VIEW}"
                       if found is not None else "#/")
    record = RunHistory.read(folder)
    if record is None:
        raise ServerError(f"{folder} holds no run.")
    uri, run_id = _sent(record, MlflowClient, say)
    base = ui_base(uri, say)
    try:  # its charts, in the model-training view
        experiment = MlflowClient(tracking_uri=uri).get_run(run_id).info.experiment_id
    except Exception:  # noqa: BLE001 - a store that does not answer: its UI finds the run
        return f"{base}#/runs/{run_id}"
    return f"{base}#/experiments/{experiment}/runs/{run_id}/model-metrics?{TRAINING_VIEW}"


def _sent(record: RunRecord, client_class: Any,
          say: Callable[[str], None] = say_nothing) -> tuple[str, str]:
    """(the store, the MLflow run) of a run: where it was sent, else sent now (an ended run;
    a run still training is sent while it trains or not at all)."""
    from dtgui.launch.trackers.mlflow_runs import send_past_run

    if record.mlflow_run_id and record.mlflow_uri:
        try:
            client_class(tracking_uri=record.mlflow_uri).get_run(record.mlflow_run_id)
        except Exception:  # noqa: BLE001 - gone from the store, or the store does not answer
            if not record.mlflow_uri.startswith("sqlite:///"):
                return record.mlflow_uri, record.mlflow_run_id  # its UI says what it knows
        else:
            return record.mlflow_uri, record.mlflow_run_id
    if record.is_active:
        raise ServerError(f"{record.run_name} is not sent to MLflow while it trains (turn on "
                          "Preferences > MLflow for the next runs); it can be once it ended.")
    uri = tracking_uri() or embedded_uri()
    say(f"Sending {record.run_name} to MLflow (it was not sent while it trained)")
    return uri, send_past_run(record, uri)


def _sweep_page(folder: Path, say: Callable[[str], None]) -> str:
    """A sweep's trials side by side, nested under the sweep's MLflow run; a sweep never
    sent gets its ended trials sent first (then shown as dtgui's runs of the sweep's name)."""
    from mlflow.tracking import MlflowClient

    from dtgui.launch.trackers.mlflow_runs import experiment_id, find_run

    uri = tracking_uri() or embedded_uri()
    client = MlflowClient(tracking_uri=uri)
    experiment = experiment_id(client, uri)
    parent = find_run(client, experiment, SWEEP_TAG, str(folder.resolve()))
    if parent is not None:
        where = f"tags.`{PARENT_TAG}` = '{parent.info.run_id}'"
    else:
        trials = RunHistory(folder / TRIALS_DIR).records()
        ids = [_sent(r, MlflowClient, say)[1] for r in trials if not r.is_active]
        if not ids:
            raise ServerError(f"{folder.name} has no ended trial to show in MLflow yet.")
        where = "attributes.run_id IN (" + ", ".join(f"'{i}'" for i in ids) + ")"
    query = urllib.parse.urlencode({"searchFilter": where}, quote_via=urllib.parse.quote)
    return f"{ui_base(uri, say)}#/experiments/{experiment}/runs?{query}&{TRAINING_VIEW}"


def overview_page(say: Callable[[str], None] = say_nothing) -> ServicePage:
    """The toolbar's MLflow: dtgui's experiment, and what it will not show (`overview`)."""
    url = mlflow_page(None, say)
    say("Looking for dtgui's runs in MLflow")
    from mlflow.tracking import MlflowClient

    uri = tracking_uri() or embedded_uri()
    return overview(url, MlflowClient(tracking_uri=uri), uri, RunHistory().records())


def overview(url: str, client: Any, uri: str, records: list[RunRecord]) -> ServicePage:
    """dtgui's experiment at `url` in the store `uri` (read with `client`), among the runs
    dtgui lists. Sending runs is off by default, so a first look finds it empty: the note
    says so and how to fill it (the Preferences' switch for the next runs, "Export to
    MLflow" for the ended ones, listed)."""
    found = client.get_experiment_by_name(EXPERIMENT)
    has_runs = found is not None and bool(client.search_runs([found.experiment_id],
                                                                max_results=1))
    unsent = [r for r in records
              if not r.is_active and not (r.mlflow_run_id and r.mlflow_uri == uri)]
    notes = []
    if not tracking_uri():
        notes.append("Runs are not sent to MLflow (it is off by default): turn it on in "
                     "Preferences > MLflow for the next runs.")
    elif not has_runs:
        notes.append("MLflow has no run of dtgui yet: runs are sent from the next one on.")
    if unsent:
        notes.append(f"{len(unsent)} ended run(s) are not in this MLflow: \"Export to "
                     "MLflow\" (below, or on the Runs page) sends them.")
    return ServicePage(url, " ".join(notes), unsent)
