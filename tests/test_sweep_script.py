"""A sweep of an own script's argument and variable, run in the background by its own
process (`dtgui sweep FOLDER`, as the GUI starts it): the sweep view is closed mid-sweep and
opened again, and shows every trial once the process has ended. No TensorFlow: the script
prints its losses, which dtgui reads."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot
from widgets import cell_text

from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.scripts.script import ScriptModel
from dtgui.core.sweeps.sweep import SweepError, SweepSpec, parse_param
from dtgui.core.sweeps.sweep_study import read_sweep
from dtgui.launch.sweeps.sweep_process import LOG_FILE, start_sweep, stop_sweep, sweep_pid
from dtgui.ui.pages.sweep_view import SweepView

PROJECT = Path(__file__).resolve().parent / "script_projects" / "sweep_target"
pytestmark = pytest.mark.gui


def script_plan(*args: str) -> Plan:
    model = ScriptModel(str(PROJECT), "train.py", args)
    return Plan(run_name="xsweep", strategy=Strategy.ONE_DEVICE, replicas_per_task=1,
                checkpoint_every=0, model=model)


def test_a_script_sweep_goes_on_in_its_own_process_while_the_view_is_closed(
        qtbot: QtBot, tmp_path: Path) -> None:
    folder = tmp_path / "xs"
    spec = SweepSpec(params=(parse_param("--x=uniform:0:1"),
                             parse_param("env:OFFSET=choice:0,0.5")),
                     trials=4, parallel=2, search="random", pruner="none")
    pid = start_sweep(folder, spec, script_plan("--steps", "5", "--seconds", "0.3"))
    assert sweep_pid(folder) == pid, (folder / LOG_FILE).read_text(errors="replace")
    with pytest.raises(SweepError, match="already runs"):
        start_sweep(folder, spec, script_plan())

    view = SweepView()
    qtbot.addWidget(view)
    view.show()
    view.open(folder)
    qtbot.waitUntil(lambda: view.table.rowCount() >= 1, timeout=60_000)
    view.close()  # dtgui closed mid-sweep: the sweep's process goes on
    view.deleteLater()

    deadline = time.monotonic() + 120
    while sweep_pid(folder) is not None and time.monotonic() < deadline:
        time.sleep(0.5)
    log = (folder / LOG_FILE).read_text()
    assert sweep_pid(folder) is None, log
    assert "sweep complete: 4 finished" in log, log

    again = SweepView()
    qtbot.addWidget(again)
    again.show()
    again.open(folder)
    qtbot.waitUntil(lambda: again.table.rowCount() == 4, timeout=60_000)
    table = read_sweep(folder)
    assert all(r.state == "finished" and r.objective is not None for r in table.rows)
    best = table.rows[0]
    # its objective is its best printed val_loss: (x - 0.3)^2 + offset + 1/5 at the last step
    assert best.objective == pytest.approx(
        (float(best.params["--x"]) - 0.3) ** 2 + float(best.params["env:OFFSET"]) + 0.2,
        abs=1e-4)
    assert best.best_step == 5
    assert not stop_sweep(folder)  # nothing runs any more

    # More trials…: the sweep goes on from its study in its own process, up to 5 in all
    assert again.more_button.isEnabled()
    again.more(5)
    qtbot.waitUntil(lambda: again.table.rowCount() == 5 and again.process is None
                    and all(cell_text(again.table, i, 1) == "finished" for i in range(5)),
                    timeout=60_000)
    assert "going on with the sweep" in (folder / LOG_FILE).read_text()


def test_a_sweep_set_up_in_the_app_starts_in_the_background_and_stops(
        qtbot: QtBot, tmp_path: Path) -> None:
    """Sweep > New sweep of the last run setup: the dialog says what is wrong as it is typed;
    Start sweep starts the sweep's process and shows its view; Stop sweep stops it."""
    from dtgui.core.settings import save_last_plan, sweeps_dir
    from dtgui.ui.app import make_app
    from dtgui.ui.dialogs.sweep_dialog import SweepDialog
    from dtgui.ui.main_window import MainWindow

    save_last_plan(script_plan("--steps", "400", "--seconds", "0.05"))
    make_app([])
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    window.new_sweep()
    dialog = window.findChild(SweepDialog)
    assert dialog is not None
    ok = dialog.buttons.buttons()[0]
    dialog.set_params(["--x=uniform:1:0"])
    assert "inverted" in dialog.param_rows[0].error.text() and not ok.isEnabled()
    dialog.set_params(["--x=uniform:0:1", "optimizer=choice:adam,sgd"])
    assert "your script is not told this setting" in dialog.param_rows[1].error.text()
    dialog.param_rows[1].remove.click()
    assert [r.text() for r in dialog.param_rows] == ["--x=uniform:0:1"]
    assert dialog.problems.text() == ""  # a new folder under the sweeps folder by default
    default = dialog.folder()
    assert default is not None and default.parent == sweeps_dir() and not default.exists()
    folder = tmp_path / "from-app"
    dialog.folder_edit.setText(str(folder))
    dialog.trials_spin.setValue(3)
    assert dialog.problems.text() == "" and ok.isEnabled()
    dialog.accept()

    qtbot.waitUntil(lambda: window.sweep_view is not None
                    and window.sweep_view.process is not None, timeout=60_000)
    view = window.sweep_view
    assert view is not None and window.pages.currentWidget() is view
    qtbot.waitUntil(lambda: view.table.rowCount() == 2, timeout=60_000)  # two at a time
    assert view.stop_button.isEnabled()
    view.stop_button.click()
    qtbot.waitUntil(lambda: sweep_pid(folder) is None, timeout=60_000)
    # the view says it ended (not "Starting the sweep…" or "Running in the background")
    qtbot.waitUntil(lambda: view.status.text().endswith("Not running."), timeout=60_000)
    log = (folder / LOG_FILE).read_text()
    assert "sweep stopped: 2 stopped" in log, log  # their state says a stop ended them
    assert [r.error for r in read_sweep(folder).rows] == ["stopped", "stopped"]


def test_trials_far_worse_than_the_median_are_pruned_early_and_keep_their_curves(
        tmp_path: Path) -> None:
    """One trial at a time, in a set order: two good ones finish, then the pruner stops the
    two whose validation loss is far above theirs at the same steps."""
    from optuna.trial import TrialState

    from dtgui.core.run_curves import bundle_curves
    from dtgui.launch.sweeps.sweep_queue import SweepQueue

    spec = SweepSpec(params=(parse_param("--x=choice:0.3,0.35,3,4"),), trials=4, parallel=1,
                     search="random", pruner="median")
    queue = SweepQueue.new(tmp_path / "p", spec,
                           script_plan("--steps", "40", "--seconds", "0.1"))
    for x in ("0.3", "0.35", "3", "4"):
        queue.study.enqueue_trial({"--x": x})
    rows = {r.number: r for r in queue.run()}
    assert [rows[n].state for n in range(4)] == ["finished", "finished", "pruned", "pruned"]
    for n in (2, 3):
        pruned = queue.study.trials[n]
        assert pruned.state is TrialState.PRUNED
        steps = sorted(pruned.intermediate_values)
        assert steps and steps[-1] < 40, steps  # stopped well before its last step
        curves = bundle_curves(rows[n].run)  # its curves are kept
        assert curves.scalars.snapshot()["val_loss"]
    assert rows[2].seconds is not None and rows[0].seconds is not None
    assert rows[2].seconds < rows[0].seconds
