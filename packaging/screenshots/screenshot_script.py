"""PNGs of a user's own training script in dtgui: the wizard's model page and review, and the
live dashboard of a real run (tests/script_projects/mwm_fit: model.fit under
MultiWorkerMirrored with tf_keras, 2 workers on this machine).

    xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python packaging/screenshots/screenshot_script.py /tmp/shots [--no-run]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import shots

shots.use_checkout()

from PySide6.QtWidgets import QApplication  # noqa: E402
from screenshot_wizard import cpu_facts  # noqa: E402

from dtgui.core.plans.plan import Plan  # noqa: E402
from dtgui.core.scripts.script import ScriptModel  # noqa: E402
from dtgui.ui.app import make_app  # noqa: E402
from dtgui.ui.wizard import RunWizard  # noqa: E402

PROJECT = shots.ROOT / "tests" / "script_projects" / "mwm_fit"
CUSTOM_LOOP = shots.ROOT / "tests" / "script_projects" / "mwm_custom_loop"


def open_wizard(model: ScriptModel, run_name: str, height: int) -> RunWizard:
    """The wizard on its model page, for a two-worker run of `model` on this small machine."""
    plan = Plan(run_name=run_name, strategy="multi_worker_mirrored", workers=2,
                replicas_per_task=1, model=model)
    wizard = RunWizard(cpu_facts(), plan)
    wizard.resize(1100, height)
    wizard.show()
    wizard.next()
    wizard.next()
    return wizard


def wizard_shots(app: QApplication, out: Path) -> None:
    model = ScriptModel(str(PROJECT), "main.py", ("3", "5"), {"MY_FLAG": "1"})
    wizard = open_wizard(model, "my-script", 860)
    page = wizard.model_page
    shots.wait_for(app, lambda: not page.script_box._looking, 60)
    shots.shoot(app, wizard, out, "script-1-model-page-keras3-refused")
    page.script_box.legacy_check.setChecked(True)
    shots.wait_for(app, page.isComplete, 60)
    shots.shoot(app, wizard, out, "script-2-model-page-tf-keras")
    wizard.next()
    wizard.review_page.tabs.setCurrentIndex(1)
    shots.shoot(app, wizard, out, "script-3-review")
    wizard.close()


def custom_loop_shots(app: QApplication, out: Path) -> None:
    """The tutorial's custom loop (it only prints): the Keras 2 warning under Keras 3, the
    printed-metrics preview on its lines, and the review of a script run."""
    model = ScriptModel(str(CUSTOM_LOOP), "main.py", ("3", "7"),
                        patterns=(r"\[it (?P<step>\d+)\] loss=(?P<loss>\S+) lr=(?P<lr>\S+)",))
    wizard = open_wizard(model, "tutorial-loop", 980)
    box = wizard.model_page.script_box
    box.printed_box.sample_edit.setPlainText(
        "Epoch: 0, accuracy: 0.327567, train_loss: 1.820119.\n[it 120] loss=0.53 lr=1e-3\n"
        "Found 6000 images belonging to 10 classes.")
    shots.wait_for(app, lambda: not box._looking, 60)
    shots.shoot(app, wizard, out, "script-5-custom-loop-keras2-warning")
    box.legacy_check.setChecked(True)
    shots.wait_for(app, wizard.model_page.isComplete, 60)
    wizard.next()
    shots.shoot(app, wizard, out, "script-6-custom-loop-review")
    wizard.close()


def dashboard_shot(app: QApplication, out: Path) -> None:
    from dtgui.launch.start.pipeline import launch_plan
    from dtgui.ui.pages.dashboard import Dashboard

    model = ScriptModel(str(PROJECT), "main.py", ("40", "4"), legacy_keras=True)
    plan = Plan(run_name="mwm-fit-script", strategy="multi_worker_mirrored", workers=2,
                replicas_per_task=1, checkpoint_every=0, steps=160, model=model)
    runs = Path(tempfile.mkdtemp(prefix="dtgui-shot-"))
    controller = launch_plan(plan, runs)
    board = Dashboard()
    board.resize(1500, 950)
    board.attach(controller)
    board.show()
    shots.wait_for(app, lambda: sum(len(x) for t in controller.metrics.scalars.snapshot().values()
                                    for x, _ in t.values()) >= 30 or controller.finished, 240)
    shots.shoot(app, board, out, "script-4-dashboard", seconds=1.0)
    controller.request_stop()
    shots.wait_for(app, lambda: controller.finished, 60)
    shots.settle(app, 0.5)


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else "/tmp/shots")
    out.mkdir(parents=True, exist_ok=True)
    app = make_app(argv[:1])
    wizard_shots(app, out)
    custom_loop_shots(app, out)
    if "--no-run" not in argv:
        dashboard_shot(app, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
