"""The multi-machine GUI parts with real widgets: choosing machines in the wizard's review page, the
Runs page (reattach / open, filter, sort, tags, notes, archive, delete, clone into the wizard),
`dtgui runs`, and opening a finished run from its bundle."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from cut_text import cut_headers
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from dtgui.cli.main import main
from dtgui.core.bundles.bundle import Bundle, render_bundle
from dtgui.core.machines.registry import Machine
from dtgui.core.plans.placement import place_local
from dtgui.core.plans.plan import MachineAccess, Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.records import RECORD_NAME, RunRecord, remember_run, remember_sweep
from dtgui.core.runs.run_index import Notes, RunRow
from dtgui.core.runs.run_state import RunState
from dtgui.core.settings import runs_dir
from dtgui.core.sweeps.sweep import SWEEP_FILE
from dtgui.launch.run_admin import RunAdminError, delete_run, source_plan
from dtgui.launch.runs.history import open_run
from dtgui.ui.pages.runs_model import (
    BEST_VAL,
    DURATION,
    FINAL_LOSS,
    NAME,
    NOTE,
    STATE,
    STEPS,
    TAGS,
)
from dtgui.ui.pages.runs_page import RunsPage
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


def shown(page: RunsPage) -> list[str]:
    return [page.cell_text(r, NAME).strip() for r in range(page.row_count())]


def loaded(qtbot: QtBot, rows: int) -> RunsPage:
    page = RunsPage()
    qtbot.addWidget(page)
    page.refresh()
    qtbot.waitUntil(lambda: page.row_count() == rows, timeout=30000)
    return page


def test_runs_page_lists_running_and_finished_runs(qtbot: QtBot) -> None:
    make_run("old", RunState.FINISHED, 0.3333, time.time() - 100)
    make_run("live", RunState.RUNNING, None, time.time())
    make_run("tiny", RunState.FINISHED, 4.01e-05, time.time() - 200)
    page = loaded(qtbot, 3)
    assert shown(page) == ["live", "old", "tiny"]
    qtbot.waitUntil(lambda: page.cell_text(1, STEPS) == "3", timeout=30000)  # from its events
    assert page.cell_text(1, FINAL_LOSS) == "0.3333"
    assert page.cell_text(2, FINAL_LOSS) == "4.01e-05"  # as the dashboard says it, not 0.0000
    assert page.cell_text(0, STATE) == "running · not watched"  # dtgui's watcher: none
    # a run still training stands out: in bold, its steps so far and how long it has run
    assert page.cell_text(0, STEPS) == "3 of 3"
    assert page.cell_text(0, DURATION) != ""
    font = page.proxy.index(0, NAME).data(Qt.ItemDataRole.FontRole)
    assert font is not None and font.bold()
    assert page.proxy.index(1, NAME).data(Qt.ItemDataRole.FontRole) is None
    assert "nothing stops the others" in str(page.proxy.index(0, STATE).data(
        Qt.ItemDataRole.ToolTipRole))
    assert "1 run(s) still training" in page.summary.text()
    page.select(0)
    assert page.buttons.reattach_button.isEnabled() and not page.buttons.open_button.isEnabled()
    with qtbot.waitSignal(page.reattachRequested) as got:
        qtbot.mouseClick(page.buttons.reattach_button, Qt.MouseButton.LeftButton)
    assert got.args[0].run_name == "live"
    page.select(1)
    with qtbot.waitSignal(page.openRequested) as got:
        qtbot.mouseClick(page.buttons.open_button, Qt.MouseButton.LeftButton)
    view = open_run(got.args[0])
    snap = view.metrics.snapshot()
    assert view.finished and view.state == "finished"
    assert list(snap.replica_loss) == [0] and len(snap.replica_loss[0][0]) == 3
    assert view.metrics.log_lines("worker:0") == ["[worker:0] step 3/3"]
    assert Path(view.bundle.path).name == "old"


def test_runs_page_filters_sorts_tags_notes_archives_and_deletes(
        qtbot: QtBot, monkeypatch: pytest.MonkeyPatch) -> None:
    now = time.time()
    make_run("alpha", RunState.FINISHED, 0.5, now - 300)
    make_run("beta", RunState.FAILED, 0.25, now - 200)
    make_run("gamma", RunState.FINISHED, 2.0, now - 100)
    live = make_run("busy", RunState.RUNNING, None, now)
    page = loaded(qtbot, 4)
    page.set_filter("FAIL")
    assert shown(page) == ["beta"]
    page.set_filter("")
    page.table.horizontalHeader().setSortIndicator(FINAL_LOSS, Qt.SortOrder.AscendingOrder)
    assert shown(page) == ["beta", "alpha", "gamma", "busy"]  # a run without a loss last
    page.table.horizontalHeader().setSortIndicator(NAME, Qt.SortOrder.DescendingOrder)
    assert shown(page) == ["gamma", "busy", "beta", "alpha"]

    # tags typed in their cell, a note with lines and any characters: kept as written
    note = 'lr too high?\n  second line: "quotes", <b>, émoji 🚀, tab\t'
    row = page.row_at(0)
    assert page.proxy.setData(page.proxy.index(0, TAGS), " baseline, adam ,, baseline")
    monkeypatch.setattr(page.notes, "ask_note", lambda _row: (note, True))
    page.notes.edit_note(row)
    folder = Path(row.folder)
    qtbot.waitUntil(lambda: Notes.read(folder).note == note, timeout=30000)
    qtbot.waitUntil(lambda: Notes.read(folder).tags == ["baseline", "adam"], timeout=30000)
    assert page.cell_text(0, NOTE) == "lr too high? …"
    # a one-line note is typed in its cell; one of several lines opens its own box
    notes = page.proxy.index(0, NOTE), page.proxy.index(1, NOTE)
    editable = Qt.ItemFlag.ItemIsEditable
    assert not page.proxy.flags(notes[0]) & editable and page.proxy.flags(notes[1]) & editable
    assert "Double-click" in str(notes[1].data(Qt.ItemDataRole.ToolTipRole))
    assert page.proxy.setData(notes[1], "try a lower lr")
    second = Path(page.row_at(1).folder)
    qtbot.waitUntil(lambda: Notes.read(second).note == "try a lower lr", timeout=30000)
    assert page.cell_text(1, NOTE) == "try a lower lr"
    page.set_filter("adam")
    assert shown(page) == ["gamma"]
    page.set_filter("")

    # archive: hidden by default, shown with the toggle, after a reload too
    page.select(shown(page).index("alpha"))
    qtbot.mouseClick(page.buttons.archive_button, Qt.MouseButton.LeftButton)
    assert "alpha" not in shown(page)
    qtbot.waitUntil(lambda: Notes.read(runs_dir() / "alpha").archived, timeout=30000)
    page = loaded(qtbot, 3)
    page.archived_check.setChecked(True)
    assert page.row_count() == 4 and "archived" in page.cell_text(shown(page).index("alpha"),
                                                                   STATE)
    page = loaded(qtbot, 3)
    assert Notes.read(folder).note == note and page.row_at(shown(page).index("gamma")).note \
        == note  # read back through the index

    # delete: refused while training (nothing asked, nothing changed), else asked, then gone
    asked: list[str] = []

    def confirm(row: RunRow, copies: list[str]) -> tuple[bool, bool]:
        asked.append(row.name)
        return True, False

    monkeypatch.setattr(page.deletion, "confirm", confirm)
    page.select(shown(page).index("busy"))
    qtbot.mouseClick(page.buttons.delete_button, Qt.MouseButton.LeftButton)
    assert "still training" in page.summary.text() and not asked
    assert Path(live.bundle).is_dir()
    with pytest.raises(RunAdminError, match="still training"):
        delete_run(live.bundle)
    page.select(shown(page).index("beta"))
    qtbot.mouseClick(page.buttons.delete_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "beta" not in shown(page), timeout=30000)
    assert asked == ["beta"] and not (runs_dir() / "beta").exists()
    assert sorted(p.name for p in runs_dir().iterdir() if not p.name.startswith(".")) == [
        "alpha", "busy", "gamma"]


def test_a_clone_fills_the_wizard_with_the_runs_plan(qtbot: QtBot, tmp_path: Path) -> None:
    from dtgui.core.plans.plan import LrSchedule, ModelFile, Optimizer, Precision, ScriptModel
    from dtgui.ui.wizard import RunWizard

    project = Path(__file__).parent / "script_projects" / "mwm_custom_loop"
    script = ScriptModel(str(project), "main.py", ("3", "--tag=a b"), {"A": "1"}, True)
    original = Plan(run_name="cloned", strategy=Strategy.MIRRORED, replicas_per_task=2,
                    steps=240, steps_per_epoch=30, per_replica_batch=48,
                    precision=Precision.MIXED_FLOAT16, xla=True, learning_rate=0.02, seed=9,
                    optimizer=Optimizer.SGD, momentum=0.8, lr_schedule=LrSchedule.COSINE,
                    checkpoint_every=40, validate_every=60, save_best=True)
    model_file = tmp_path / "proj" / "models" / "net.py"  # in a folder of its project
    model_file.parent.mkdir(parents=True)
    model_file.write_text("def build_model(): ...\ndef make_dataset(): ...\n")
    own_model = ModelFile(str(model_file), str(tmp_path / "proj"))
    for plan in (original, original.with_changes(model=script, strategy=Strategy.ONE_DEVICE,
                                                 replicas_per_task=1),
                 original.with_changes(model=own_model, run_name="own")):
        name = f"{plan.run_name}-{plan.strategy}"
        render_bundle(place_local(plan.with_changes(run_name=name)), runs_dir() / name)
        source, job = source_plan(runs_dir() / name)
        assert job is None
        wizard = RunWizard(None)
        qtbot.addWidget(wizard)
        wizard.load_plan(source)
        drafted = wizard.ctx.draft()
        expected = source.with_changes(tasks=(), cluster={}, machines={})
        assert drafted.to_dict() == expected.to_dict()
        if plan.model_file is not None:  # the file the run trained with: the bundle's copy
            assert drafted.model_file == ModelFile(
                str(runs_dir() / name / "project" / "models" / "net.py"),
                str(runs_dir() / name / "project"))
        if plan.script is not None:  # the script the run trained with: the bundle's copy
            assert drafted.script is not None
            assert Path(drafted.script.project) == runs_dir() / name / "project"
            assert (drafted.script.entry, drafted.script.args) == ("main.py",
                                                                   ("3", "--tag=a b"))


def test_a_sweep_lists_with_its_trials_and_opens_its_view(qtbot: QtBot, tmp_path: Path) -> None:
    sweep = tmp_path / "lr-search"
    base = Plan(run_name="lr-search", strategy=Strategy.MIRRORED, replicas_per_task=2)
    (sweep / "trials").mkdir(parents=True)
    (sweep / SWEEP_FILE).write_text(json.dumps({"spec": {}, "plan": base.to_dict()}))
    for n, val in enumerate((0.5, 0.25)):
        record = make_run(f"lr-search-{n}", RunState.FINISHED, val, time.time() - 60 + n)
        with open(next(Path(record.bundle).glob("output/events-*.jsonl")), "a") as events:
            events.write(json.dumps({"v": 2, "kind": "validation", "task": "worker:0",
                                     "t": time.time(), "step": 3, "loss": val}) + "\n")
        Path(record.bundle).rename(sweep / "trials" / f"lr-search-{n}")
    make_run("single", RunState.FINISHED, 0.1, time.time())
    remember_sweep(sweep)
    elsewhere = tmp_path / "bundles" / "by-hand"  # a bundle run outside the runs folder
    elsewhere.parent.mkdir()
    Path(make_run("by-hand", RunState.FINISHED, 0.2, time.time() - 300).bundle).rename(elsewhere)
    remember_run(elsewhere)
    remember_run(sweep / "trials" / "lr-search-0")  # never twice
    page = loaded(qtbot, 3)  # the trials folded under their sweep
    assert shown(page) == ["single", "\u25b8 lr-search (sweep)", "by-hand"]
    qtbot.waitUntil(lambda: page.cell_text(2, STEPS) == "3", timeout=30000)  # its events read
    assert page.row_at(2).folder == str(elsewhere)
    # the sweep's Best val.: its trials' best, once their events are read (no second look)
    qtbot.waitUntil(lambda: page.cell_text(1, BEST_VAL) == "0.25", timeout=30000)
    qtbot.mouseClick(page.table.viewport(), Qt.MouseButton.LeftButton,
                     pos=page.table.visualRect(page.proxy.index(1, NAME)).center())
    assert shown(page) == ["single", "\u25be lr-search (sweep)", "lr-search-1", "lr-search-0",
                           "by-hand"]
    assert page.row_at(2).parent == str(sweep)
    page.set_filter("lr-search-0")  # a trial the filter names shows, folded or not
    assert "lr-search-0" in shown(page)
    page.set_filter("")
    with qtbot.waitSignal(page.sweepRequested) as got:
        page.select(1)
        qtbot.mouseClick(page.buttons.open_button, Qt.MouseButton.LeftButton)
    assert got.args[0] == sweep


def test_names_are_read_whole_and_the_columns_fill_the_table(qtbot: QtBot) -> None:
    """At 1366 px long run names (a sweep trial's) are read whole, the notes give width
    first, and the columns fill the table's width, no more."""
    now = time.time()
    for n in range(3):
        make_run(f"mirrored-20261129-041500-t{n:03d}", RunState.FINISHED, 0.5, now - n)
    page = loaded(qtbot, 3)
    Notes(note="a long note that says much more than a cell shows " * 3).write(
        Path(page.row_at(0).folder))
    page.refresh()
    qtbot.waitUntil(lambda: page.row_at(0).note != "", timeout=30000)
    page.resize(1366 - 48, 600)
    page.show()
    qtbot.wait(20)
    header = page.table.horizontalHeader()
    metrics = page.table.fontMetrics()
    for r in range(page.row_count()):
        assert metrics.horizontalAdvance(page.cell_text(r, NAME)) < header.sectionSize(NAME)
    used = sum(header.sectionSize(c) for c in range(header.count()))
    assert abs(used - page.table.viewport().width()) <= header.count()  # rounding
    assert not cut_headers(page)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["runs", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_runs_on_the_command_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    make_run("one", RunState.FINISHED, 4.01e-05, time.time() - 50)
    make_run("two", RunState.FINISHED, 0.125, time.time())
    twin = make_run("two-again", RunState.STOPPED, None, time.time() - 10)
    data = json.loads((Path(twin.bundle) / RECORD_NAME).read_text())
    data["run_name"] = "two"  # two runs called "two"
    (Path(twin.bundle) / RECORD_NAME).write_text(json.dumps(data))

    code, out, _ = run_cli(capsys, "list")
    assert code == 0 and "4.01e-05" in out and out.splitlines()[0].startswith("name")
    code, out, err = run_cli(capsys, "show", "two")
    assert code == 2 and "2 runs are called 'two'" in err and twin.run_id in err
    code, out, err = run_cli(capsys, "show", "nothing")
    assert code == 2 and "no run is called 'nothing'" in err
    code, out, _ = run_cli(capsys, "tag", "one", "best so far")
    assert code == 0 and "best so far" in out
    code, out, _ = run_cli(capsys, "list", "--json", "--filter", "best")
    rows = json.loads(out)
    assert [(r["name"], r["tags"], r["steps"], r["final_loss"]) for r in rows] == [
        ("one", ["best so far"], 3, 4.01e-05)]  # the steps: from its events
    code, out, _ = run_cli(capsys, "show", str(runs_dir() / "one"))
    assert code == 0 and "tags: best so far" in out and "steps: 3" in out
    code, out, err = run_cli(capsys, "export", "one", str(tmp_path / "out"))
    assert code == 0, err
    exported = Bundle.open(tmp_path / "out")
    assert exported.plan.run_name == "one" and not (tmp_path / "out" / RECORD_NAME).exists()
    code, out, err = run_cli(capsys, "delete", twin.run_id, "--yes")
    assert code == 0 and not Path(twin.bundle).exists()
    code, out, _ = run_cli(capsys, "list", "--json")
    assert sorted(r["name"] for r in json.loads(out)) == ["one", "two"]

    # a sweep by the name `runs list` prints: what it searches, its settings, its trials
    sweep = tmp_path / "lr-search"
    base = Plan(run_name="lr-search", strategy=Strategy.MIRRORED, replicas_per_task=2)
    (sweep / "trials").mkdir(parents=True)
    (sweep / SWEEP_FILE).write_text(json.dumps({"spec": {
        "search": "grid", "trials": 2, "params": ["learning_rate=choice:0.1,0.01"]},
        "plan": base.to_dict()}))
    Path(make_run("lr-search-0", RunState.FINISHED, 0.5, time.time()).bundle).rename(
        sweep / "trials" / "lr-search-0")
    remember_sweep(sweep)
    code, out, _ = run_cli(capsys, "list")
    assert code == 0 and "\nlr-search " in out and "\n  lr-search-0 " in out
    code, out, err = run_cli(capsys, "show", "lr-search")
    assert code == 0, err
    assert "lr-search  (sweep)" in out and "    search: grid" in out
    assert "    varies learning_rate=choice:0.1,0.01" in out and "    strategy: mirrored" in out
    assert "trials:\n    lr-search-0: finished" in out


def test_a_delete_keeps_the_run_when_a_machine_cannot_be_reached() -> None:
    from dtgui.core.runs.records import MachineRecord

    record = make_run("far", RunState.FINISHED, 0.5, time.time())
    record.machines = [MachineRecord("h9", f".cache/dtgui/runs/{record.run_id}/h9")]
    record.save()

    def unreachable(rec: MachineRecord, directory: str) -> None:
        raise ConnectionError("h9 does not answer")

    done = delete_run(record.bundle, remote=True, remove=unreachable)
    assert not done.local and "h9 does not answer" in done.text()
    assert "kept" in done.text() and Path(record.bundle, RECORD_NAME).is_file()
    record.machines = [MachineRecord("h9", "/home/someone")]  # not the run's own directory
    record.save()
    assert not delete_run(record.bundle, remote=True, remove=unreachable).local
    assert delete_run(record.bundle).local and not Path(record.bundle).exists()
