"""Screenshots of the training-quality views (for reviewing how they look):

    xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python packaging/screenshots/screenshot_training.py OUTDIR

Writes OUTDIR/dashboard-validation.png (a finished run opened from its bundle: smoothed loss
with the validation loss and its best point, the Validation and learning-rate panels, the
saved model's bar) and OUTDIR/compare.png (three runs compared in the Runs page's Compare
view). The runs are written as the training program writes them (tests/training_events.py),
into a temporary data directory. Without a DISPLAY it falls back to the offscreen platform.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

if not os.environ.get("DISPLAY"):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import shots  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402


def settle(app: QApplication, rounds: int = 30) -> None:
    shots.settle(app, rounds=rounds)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", default="1500x950")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    data = Path(tempfile.mkdtemp(prefix="dtgui-shots-"))
    os.environ["DTGUI_DATA_DIR"] = str(data / "data")
    os.environ["DTGUI_CONFIG_DIR"] = str(data / "config")

    from training_events import T0, write_run

    from dtgui.core.settings import runs_dir
    from dtgui.launch.runs.history import open_run
    from dtgui.ui.app import make_app
    from dtgui.ui.compare import CompareView
    from dtgui.ui.pages.dashboard import Dashboard

    app = make_app(sys.argv[:1])
    w, h = (int(v) for v in args.size.split("x"))
    root = runs_dir()
    main_run = write_run(root, "digits-adamw-cosine", replicas=4, steps=2000, steps_per_call=20,
                         steps_per_epoch=250, rate=0.004, floor=0.12, seconds_per_step=0.03,
                         examples_per_sec=4200, lr=0.003, warmup=200, overfit_from=6,
                         overfit=0.025, save_best=True, created=T0, seed=4,
                         plan_fields={"optimizer": "adamw", "weight_decay": 0.01,
                                      "lr_schedule": "warmup_cosine", "warmup_steps": 200})
    others = [
        write_run(root, "digits-sgd-step", replicas=4, steps=2000, steps_per_call=20,
                  steps_per_epoch=250, rate=0.0022, floor=0.2, seconds_per_step=0.02,
                  examples_per_sec=6400, lr=0.05, overfit_from=9, created=T0 + 600, seed=5,
                  plan_fields={"optimizer": "sgd", "momentum": 0.9, "lr_schedule": "step",
                               "lr_step_every": 800, "lr_step_factor": 0.1}),
        write_run(root, "digits-older-run", replicas=2, steps=1500, steps_per_call=20,
                  steps_per_epoch=250, rate=0.003, floor=0.16, seconds_per_step=0.04,
                  examples_per_sec=1600, validation=False, created=T0 + 1200, seed=6,
                  drop_fields=("optimizer", "lr_schedule", "weight_decay", "momentum")),
    ]

    dash = Dashboard()
    dash.resize(w, h)
    dash.setWindowTitle("dtgui — dashboard")
    dash.show()
    dash.attach(open_run(main_run))
    for _ in range(20):
        settle(app, 2)
        dash.refresh()
    dash.repaint()
    settle(app)
    ok = shots.save(app, dash, args.out / "dashboard-validation.png")
    dash.detach()
    dash.close()

    view = CompareView()
    view.resize(w, h)
    view.setWindowTitle("dtgui — compare runs")
    view.show()
    done: list[bool] = []
    view.loaded.connect(lambda _s: done.append(True))
    view.load([main_run, *others])
    while not done:
        app.processEvents()
    settle(app)
    ok = shots.save(app, view, args.out / "compare.png") and ok
    view.set_axis_mode("time")
    settle(app)
    ok = shots.save(app, view, args.out / "compare-wall-time.png") and ok
    view.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
