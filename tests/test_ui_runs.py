"""The multi-machine GUI parts with real widgets: choosing machines in the wizard's review page, the
Runs page (reattach / open), and opening a finished run from its bundle."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot
from widgets import cell, cell_text

from dtgui.core.bundle import render_bundle
from dtgui.core.machines import Machine
from dtgui.core.placement import place_local
from dtgui.core.plan import MachineAccess, Plan
from dtgui.core.run_state import RunState
from dtgui.core.runs import RunRecord
from dtgui.core.settings import runs_dir
from dtgui.core.strategies import Strategy
from dtgui.launch.history import open_run
from dtgui.ui.runs_page import RunsPage
from dtgui.ui.wizard.machines_box import LOCAL_TEXT, MachinesBox

pytestmark = pytest.mark.gui
MACHINES = [Machine("gpu box", "10.1.0.2", user="me", auth="agent"),
            Machine("h3", "10.1.0.3", 2222, user="me", auth="agent")]


def test_machines_box_places_tasks_on_the_chosen_machines(qtbot: QtBot) -> None:
    box = MachinesBox()
    qtbot.addWidget(box)
    box.set_machines(MACHINES)
    plan = Plan(run_name="mh", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                replicas_per_task=1)
    box.set_plan(plan)
    combos = [c for c in box.findChildren(type(box._combos["worker:0"]))
              if c.objectName().startswith("machineFor:")]  # (the box's target has one too)
    assert [c.objectName() for c in combos] == ["machineFor:worker:0", "machineFor:worker:1"]
    assert combos[0].currentText() == LOCAL_TEXT and not box.is_remote()
    combos[0].setCurrentIndex(combos[0].findData("gpu box"))
    combos[1].setCurrentIndex(combos[1].findData("h3"))
    assert box.assignments() == {"worker:0": "gpu box", "worker:1": "h3"}
    python = box.findChild(type(box._pythons["h3"]), "pythonFor:h3")
    assert python is not None
    python.setText("/opt/tf/bin/python3")
    placed = box.preview(plan)
    assert [t.machine for t in placed.tasks] == ["gpu box", "h3"]
    assert [a.split(":")[0] for a in placed.cluster["worker"]] == ["10.1.0.2", "10.1.0.3"]
    assert placed.machines["h3"] == MachineAccess(address="10.1.0.3", login="me@10.1.0.3:2222",
                                                  python="/opt/tf/bin/python3")
    box.remember(placed)  # a remembered plan brings its choices back
    box.set_machines(MACHINES)
    box.set_plan(plan)
    assert box.assignments() == {"worker:0": "gpu box", "worker:1": "h3"}


def make_run(name: str, state: RunState, loss: float | None, created: float) -> RunRecord:
    plan = place_local(Plan(run_name=name, strategy=Strategy.ONE_DEVICE, replicas_per_task=1,
                            steps=3))
    bundle = render_bundle(plan, runs_dir() / name)
    events = bundle.events_file(plan.tasks[0])
    events.write_text("".join(json.dumps({"v": 1, "kind": "step", "task": "worker:0",
                                          "t": created + i, "step": i, "loss": 1.0 / i,
                                          "replica_losses": [1.0 / i], "replica_ids": [0]})
                              + "\n" for i in (1, 2, 3)))
    bundle.log_file(plan.tasks[0]).parent.mkdir(parents=True, exist_ok=True)
    bundle.log_file(plan.tasks[0]).write_text("[worker:0] step 3/3\n")
    record = RunRecord(f"{name}-abc123", name, str(bundle.path), "one_device", created=created,
                       state=state, final_loss=loss)
    record.save()
    return record


def test_runs_page_lists_running_and_finished_runs(qtbot: QtBot) -> None:
    make_run("old", RunState.FINISHED, 0.3333, time.time() - 100)
    make_run("live", RunState.RUNNING, None, time.time())
    make_run("tiny", RunState.FINISHED, 4.01e-05, time.time() - 200)
    page = RunsPage()
    qtbot.addWidget(page)
    page.refresh()
    qtbot.waitUntil(lambda: page.table.rowCount() == 3, timeout=5000)
    assert [cell_text(page.table, r, 0) for r in range(3)] == ["live", "old", "tiny"]
    assert cell_text(page.table, 1, 4) == "0.3333"
    assert cell_text(page.table, 2, 4) == "4.01e-05"  # as the dashboard says it, not 0.0000
    assert cell_text(page.table, 0, 3) == "running · not watched"  # dtgui's watcher: none
    assert "nothing stops the others" in cell(page.table, 0, 3).toolTip()
    assert "1 run(s) still training" in page.summary.text()
    page.table.selectRow(0)
    assert page.reattach_button.isEnabled() and not page.open_button.isEnabled()
    with qtbot.waitSignal(page.reattachRequested) as got:
        qtbot.mouseClick(page.reattach_button, Qt.MouseButton.LeftButton)
    assert got.args[0].run_name == "live"
    page.table.selectRow(1)
    with qtbot.waitSignal(page.openRequested) as got:
        qtbot.mouseClick(page.open_button, Qt.MouseButton.LeftButton)
    view = open_run(got.args[0])
    snap = view.metrics.snapshot()
    assert view.finished and view.state == "finished"
    assert list(snap.replica_loss) == [0] and len(snap.replica_loss[0][0]) == 3
    assert view.metrics.log_lines("worker:0") == ["[worker:0] step 3/3"]
    assert Path(view.bundle.path).name == "old"
