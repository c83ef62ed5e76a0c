"""Screenshots of a dtgui run and sweep in MLflow's UI and TensorBoard's HParams dashboard
(docs/images/mlflow-*.png, tensorboard-hparams.png), with real TensorFlow runs of the demo.
Run by hand (not a test: minutes of training and server starts), then look at the PNGs:

    .venv/bin/python packaging/screenshots/screenshot_mlflow.py [OUT_DIR]

MLflow's server is the one `bash packaging/dev.sh test` installs in the venv's `mlflow-server/`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
            "--disable-dev-shm-usage", "--virtual-time-budget=30000",
            "--run-all-compositor-stages-before-draw"]


def shot(url: str, out: Path, size: str = "1400,900") -> None:
    subprocess.run([*CHROMIUM, f"--window-size={size}", f"--screenshot={out}", url],
                   check=True, timeout=300, capture_output=True)
    print("wrote", out, flush=True)


def wait_answer(url: str, seconds: float = 900) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(1)
    raise SystemExit(f"{url} did not answer")


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "images"
    home = Path(tempfile.mkdtemp(prefix="dtgui-screens-"))
    os.environ["DTGUI_DATA_DIR"] = str(home / "data")
    os.environ["DTGUI_CONFIG_DIR"] = str(home / "config")
    store = f"sqlite:///{home / 'mlflow.db'}"
    os.environ["DTGUI_MLFLOW"] = store

    from dtgui.core.plans.plan import Plan
    from dtgui.core.plans.strategies import Strategy
    from dtgui.core.sweeps.sweep import SweepSpec, parse_param
    from dtgui.launch.start.pipeline import launch_plan
    from dtgui.launch.sweeps.sweep_queue import SweepQueue
    from dtgui.launch.trackers import mlflow_writer
    from dtgui.launch.trackers.tensorboard_server import start_tensorboard, stop_tensorboard
    from dtgui.worker.machine_probe import choose_free_ports

    plan = Plan(run_name="demo-mirrored", strategy=Strategy.MIRRORED, replicas_per_task=2,
                steps=400, steps_per_epoch=50, checkpoint_every=0)
    controller = launch_plan(plan, home / "runs")
    assert controller.wait(1800), "the run did not end"
    print("run", controller.state, controller.message, flush=True)
    sweep = Plan(run_name="demo-sweep", strategy=Strategy.ONE_DEVICE, replicas_per_task=1,
                 steps=60, steps_per_epoch=20, checkpoint_every=0)
    spec = SweepSpec(params=(parse_param("lr=loguniform:1e-4:1e-1"),
                             parse_param("batch-size=choice:16,32,64")),
                     trials=4, parallel=2, search="random", objective="val_loss",
                     pruner="none")
    rows = SweepQueue.new(home / "runs" / "demo-sweep", spec, sweep).run()
    print("sweep", [(r.number, r.state, r.objective) for r in rows], flush=True)
    assert mlflow_writer.drain_all(600, while_answering=False)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("dtgui")
    assert experiment is not None
    exp = experiment.experiment_id
    record = controller.record
    assert record is not None
    run_id = record.mlflow_run_id
    port = choose_free_ports(1)[0]
    server = subprocess.Popen([str(Path(sys.prefix, "mlflow-server", "bin", "mlflow")), "server",
                               "--backend-store-uri", store, "--host", "127.0.0.1",
                               "--port", str(port), "--workers", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True, cwd=home)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_answer(f"{url}/health")
        # the run's charts (a loss curve per replica), and the sweep's trials compared
        shot(f"{url}/#/experiments/{exp}/runs/{run_id}/model-metrics",
             out / "mlflow-run-loss.png", "1800,1100")
        parent = next(r for r in client.search_runs([exp]) if r.info.run_name == "demo-sweep")
        trials = [r.info.run_id for r in client.search_runs(
            [exp], filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")]
        query = urllib.parse.quote(json.dumps(trials))
        shot(f'{url}/#/compare-runs?runs={query}&experiments=["{exp}"]',
             out / "mlflow-sweep-trials.png", "1800,1100")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(60)
    board = start_tensorboard([home / "runs"])
    try:
        time.sleep(10)  # its first load of the folders
        shot(f"{board.url}#hparams", out / "tensorboard-hparams.png")
    finally:
        stop_tensorboard()
    print("files in", home)
    return 0


if __name__ == "__main__":
    sys.exit(main())
