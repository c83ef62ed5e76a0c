"""Screenshots of a dtgui run and sweep in MLflow's UI and TensorBoard's HParams dashboard
(docs/images/mlflow-*.png, tensorboard-hparams.png), with real TensorFlow runs of the demo,
opened as the app's "Open in MLflow" and toolbar "TensorBoard" open them (MLflow's UI started
by dtgui on its store; TensorBoard on every run dtgui lists: the sweep is outside the runs
folder). Run by hand (not a test: minutes of training and server starts), then look at the
PNGs:

    .venv/bin/python packaging/screenshots/screenshot_mlflow.py [OUT_DIR]

MLflow's UI is the one `bash packaging/dev.sh` installs in the venv's `mlflow-server/`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
            "--disable-dev-shm-usage", "--virtual-time-budget=30000",
            "--run-all-compositor-stages-before-draw"]


def shot(url: str, out: Path, size: str = "1400,900") -> None:
    subprocess.run([*CHROMIUM, f"--window-size={size}", f"--screenshot={out}", url],
                   check=True, timeout=300, capture_output=True)
    print("wrote", out, flush=True)


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
    from dtgui.launch.trackers.local_server import stop_servers
    from dtgui.launch.trackers.mlflow_ui import mlflow_page
    from dtgui.launch.trackers.tensorboard_server import start_tensorboard

    plan = Plan(run_name="demo-mirrored", strategy=Strategy.MIRRORED, replicas_per_task=2,
                steps=400, steps_per_epoch=50, checkpoint_every=0)
    controller = launch_plan(plan)
    assert controller.wait(1800), "the run did not end"
    print("run", controller.state, controller.message, flush=True)
    sweep = Plan(run_name="demo-sweep", strategy=Strategy.ONE_DEVICE, replicas_per_task=1,
                 steps=60, steps_per_epoch=20, checkpoint_every=0)
    spec = SweepSpec(params=(parse_param("lr=loguniform:1e-4:1e-1"),
                             parse_param("batch-size=choice:16,32,64")),
                     trials=4, parallel=2, search="random", objective="val_loss",
                     pruner="none")
    sweep_folder = home / "sweeps" / "demo-sweep"
    rows = SweepQueue.new(sweep_folder, spec, sweep).run()
    print("sweep", [(r.number, r.state, r.objective) for r in rows], flush=True)
    assert mlflow_writer.drain_all(600, while_answering=False)
    try:
        # the run's charts (a loss curve per replica): "Open in MLflow" on the run
        run_page = mlflow_page(controller.bundle.path)
        print("run page", run_page, flush=True)
        shot(run_page, out / "mlflow-run-loss.png", "1800,1100")
        # the sweep's trials: "Open in MLflow" on the sweep
        sweep_page = mlflow_page(sweep_folder)
        print("sweep page", sweep_page, flush=True)
        shot(sweep_page, out / "mlflow-sweep-trials.png", "1800,1100")
    finally:
        stop_servers()
    board = start_tensorboard()  # the toolbar's: every run, the sweep's trials among them
    try:
        time.sleep(10)  # its first load of the folders
        print("tensorboard", board.url, flush=True)
        shot(f"{board.url}#hparams", out / "tensorboard-hparams.png")
    finally:
        stop_servers()
    print("files in", home)
    return 0


if __name__ == "__main__":
    sys.exit(main())
