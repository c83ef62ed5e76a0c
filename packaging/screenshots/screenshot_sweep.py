"""Screenshots of sweeps in the real app under Xvfb: the sweep dialog's form (and a row's
problem shown beside it), the sweep view's table with the parallel-coordinates plot, the
objective against a parameter, and Compare of the two best trials.

  xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python packaging/screenshots/screenshot_sweep.py \
      OUTDIR SWEEP_FOLDER

SWEEP_FOLDER is a finished sweep (`dtgui sweep SWEEP_FOLDER ...` of the demo, e.g. 8 trials
over lr and batch-size validated every epoch); nothing is trained here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import shots
from PySide6.QtCore import QItemSelectionModel, Qt
from PySide6.QtWidgets import QTabWidget

from dtgui.core.sweeps.sweep import load_sweep
from dtgui.ui.app import make_app
from dtgui.ui.dialogs.sweep_param_row import LOG_RANGE, RANGE
from dtgui.ui.main_window import MainWindow


def main() -> int:
    out = Path(sys.argv[1])
    folder = Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    app = make_app()
    window = MainWindow()
    window.resize(1500, 920)
    window.show()
    _spec, plan = load_sweep(folder)

    dialog = window.sweep_plan(plan)
    lr, batch = dialog.param_rows
    lr.space.setCurrentText(LOG_RANGE)
    warmup = dialog.add_param("warmup=int:0:50")
    clip = dialog.add_param("clip-norm=uniform:0.5:5")
    dialog.trials_spin.setValue(24)
    dialog.parallel_spin.setValue(4)
    dialog.folder_edit.setText(str(Path.home() / "sweeps" / "lr-batch-warmup"))
    shots.settle(app, 0.5)
    shots.save(app, dialog, out / "sweep_dialog.png")
    clip.low.setText("5")
    clip.high.setText("0.5")
    lr.low.setText("0")
    batch.space.setCurrentText(RANGE)
    batch.low.setText("16")
    batch.high.setText("128")
    dialog.add_param("--dropout=choice:0.1,0.3")  # the built-in loop takes no arguments
    shots.settle(app, 0.5)
    shots.save(app, dialog, out / "sweep_dialog_errors.png")
    dialog.reject()
    del warmup

    # a GPU run setup over this machine and two registered ones, by their last GPU figures
    from dtgui.core.machines.hardware import GpuInfo
    from dtgui.core.plans.strategies import Strategy
    from dtgui.ui.dialogs.sweep_dialog import SweepDialog

    gib = 1 << 30
    h100 = [GpuInfo(i, "NVIDIA H100 80GB HBM3", 80 * gib, 0, 0.0) for i in range(4)]
    h100[1] = GpuInfo(1, "NVIDIA H100 80GB HBM3", 80 * gib, int(1.56 * gib), 97.0)  # in use
    gpu_plan = plan.with_changes(device_kind="gpu", strategy=Strategy.ONE_DEVICE,
                                 replicas_per_task=1, tasks=(), cluster={})
    gpus = SweepDialog(gpu_plan, parent=window, machines=["h100a", "h100b"],
                       gpus={"local": h100[:2], "h100a": h100, "h100b": []})
    for i in range(gpus.machines_list.count()):
        machine = gpus.machines_list.item(i)
        if machine is not None and not machine.text().startswith("h100b"):
            machine.setCheckState(Qt.CheckState.Checked)
    gpus.parallel_spin.setValue(6)
    gpus.folder_edit.setText(str(Path.home() / "sweeps" / "lr-batch-gpus"))
    gpus.show()
    shots.settle(app, 0.5)
    shots.save(app, gpus, out / "sweep_dialog_gpus.png")
    gpus.reject()

    view = shots.sweep_view(app, window, folder)
    if view is None:
        return 1
    shots.settle(app, 1.5)
    shots.save(app, window, out / "sweep_table.png")
    plots = view.parallel.parent().parent()
    if isinstance(plots, QTabWidget):
        plots.setCurrentIndex(1)
        shots.settle(app, 0.5)
        shots.save(app, window, out / "sweep_scatter.png")
        plots.setCurrentIndex(0)

    data = view.table_data
    assert data is not None
    best_two = [r for r in data.rows if r.state == "finished"][:2]
    view.table.clearSelection()
    selection = view.table.selectionModel()
    flags = QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
    for row in range(view.table.rowCount()):
        item = view.table.item(row, 0)
        if item is not None and int(item.text()) in {r.number for r in best_two}:
            selection.select(view.table.model().index(row, 0), flags)
    view.compare_button.click()
    compare = window.compare
    if compare is None or not shots.wait_for(
            app, lambda: len(compare.summaries) == len(best_two), 60):
        print("Compare did not show the two best trials", file=sys.stderr)
        return 1
    shots.settle(app, 2.0)
    shots.save(app, window, out / "sweep_compare.png")
    print(f"screenshots in {out}: trials {[r.number for r in best_two]} compared")
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
