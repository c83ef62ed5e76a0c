"""Single runs that wait for a busy GPU ("Launch when free"): the queue's own process (real,
detached) reads this machine's GPU through the machine probe and a fake NVML replaying the
H100 captures (tests/fake_nvml), and starts each queued run through the one pipeline (the
stub training child) when its GPU is free: first when another process leaves the GPU, then,
for a second run on the only GPU, when the first run ends. The queue is reordered and
cancelled while a run waits; a damaged queue file is refused with what to do, and kept.
A run started from a bundle (`dtgui run`) holds its machine, outside the runs directory too;
a queued run that cannot start ends "could not start" with its cause and the next starts;
a queue's process killed while it starts a run is recovered by the next dtgui command."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fakes import FAKE_NVML, wait_for
from pytestqt.qtbot import QtBot
from widgets import answer_question

from dtgui.cli.main import main as cli
from dtgui.core.bundles.bundle import render_bundle
from dtgui.core.plans.placement import place_local
from dtgui.core.plans.plan import DeviceKind, MachineAccess, ModelFile, Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.queue_file import (
    CANCELLED,
    FAILED,
    STARTING,
    QueueEntry,
    QueueError,
    ahead_of,
    moved,
    with_state,
)
from dtgui.core.runs.records import RunHistory, RunRecord, outside_runs
from dtgui.core.runs.run_state import RunState
from dtgui.core.settings import runs_dir
from dtgui.core.time_limits import start_limit
from dtgui.launch.queue.run_queue import (
    QUEUE_PROCESS,
    QueuedRun,
    cancel_queued,
    change_queue,
    enqueue,
    queue_dir,
    queue_pid,
    queued_runs,
)
from dtgui.launch.queue.run_queue_process import RunQueue
from dtgui.launch.run_admin import list_rows
from dtgui.launch.start.pipeline import launch_bundle, reattach
from dtgui.launch.start.watcher import stop_watcher, watcher_pid
from dtgui.ui.pages.run_queue_panel import RunQueuePanel


def gpu_plan(name: str, python: str) -> Plan:
    """A run placed on this machine's only GPU, its tasks run by `python`."""
    plan = place_local(Plan(run_name=name, strategy=Strategy.ONE_DEVICE,
                            device_kind=DeviceKind.GPU, replicas_per_task=1, steps=3000,
                            checkpoint_every=0))
    tasks = tuple(dataclasses.replace(t, gpus=(0,)) for t in plan.tasks)
    return plan.with_changes(tasks=tasks, machines={"local": MachineAccess(python=python)})


def entry(name: str) -> QueuedRun | None:
    return next((q for q in queued_runs() if q.entry.name == name), None)


def running(name: str) -> RunRecord | None:
    return next((r for r in RunHistory().live() if r.run_name == name), None)


def cpu_plan(name: str, python: str, **changes: object) -> Plan:
    """A run on this machine's CPU, its tasks run by `python`."""
    return place_local(Plan(run_name=name, strategy=Strategy.ONE_DEVICE, replicas_per_task=1,
                            steps=3000,
                            checkpoint_every=0, machines={"local": MachineAccess(python=python)},
                            **changes))  # type: ignore[arg-type]


def cell(panel: RunQueuePanel, row: int, col: int) -> str:
    item = panel.table.item(row, col)
    return item.text() if item is not None else ""


def stop(record: RunRecord) -> RunRecord:
    """End a queued run that started as the Runs page would: take it from its watcher,
    reattach, Stop."""
    assert watcher_pid(record) is not None  # the queue handed it to a watcher
    assert stop_watcher(record)
    controller = reattach(RunRecord.load(Path(record.bundle)))
    controller.request_stop()
    assert controller.wait(60), "the run did not stop"
    return RunRecord.load(Path(record.bundle))


@pytest.fixture
def queue_ended() -> Iterator[None]:
    """After the test, also a failed one: no queue process, no run of it left training."""
    yield
    QUEUE_PROCESS.stop(queue_dir())
    for record in RunHistory().live():
        with contextlib.suppress(Exception):
            stop(record)


def test_two_runs_want_the_only_gpu_and_the_second_starts_when_the_first_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qtbot: QtBot, queue_ended: None,
        stub_python: Callable[..., str], capsys: pytest.CaptureFixture[str]) -> None:
    load = tmp_path / "another-process-on-the-gpu"
    load.touch()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(FAKE_NVML), *filter(None, [os.environ.get("PYTHONPATH")])]))
    monkeypatch.setenv("DTGUI_FAKE_NVML_LOADED_WHILE", str(load))
    python = stub_python(step_seconds=0.2)

    first = enqueue(gpu_plan("first", python))
    assert first.position == 1 and queue_pid() is not None
    wait_for(lambda: "another process" in getattr(entry("first"), "text", ""), 60,
             "the queue never said the GPU is taken by another process")
    assert running("first") is None
    load.unlink()  # the other process leaves the GPU
    # started: a run of the history now, followed by its watcher, and out of the queue
    wait_for(lambda: running("first") is not None and entry("first") is None, 60,
             "the first run did not start")

    # a run on the CPU waits for the dtgui runs on its machine
    cpu = QueueEntry("cpu", Plan(run_name="cpu", strategy=Strategy.ONE_DEVICE).to_dict())
    assert RunQueue(queue_dir()).waits_for(cpu) == "run first on this machine"

    # the second into a runs folder of its own: in the history all the same, once started
    second = enqueue(gpu_plan("second", python), runs_root=tmp_path / "queued")
    assert second.position == 1
    wait_for(lambda: "run first" in getattr(entry("second"), "text", ""), 60,
             "the second run does not say it waits for the first")
    assert entry("second") is not None and running("second") is None

    # two more behind it, on the same GPU: they wait for the one ahead; on the Runs page's
    # panel, reordered and cancelled
    third, fourth = enqueue(gpu_plan("third", python)), enqueue(gpu_plan("fourth", python))
    assert (third.position, fourth.position) == (2, 3)
    panel = RunQueuePanel()
    qtbot.addWidget(panel)
    panel.refresh()
    qtbot.waitUntil(lambda: panel.table.rowCount() == 3, timeout=60_000)
    assert not panel.isHidden()
    panel.select(fourth.entry.id)
    assert not panel.down_button.isEnabled() and panel.up_button.isEnabled()
    panel.up_button.click()
    qtbot.waitUntil(lambda: [q.entry.name for q in panel.runs] == ["second", "fourth",
                                                                   "third"], timeout=60_000)
    assert [q.entry.name for q in queued_runs()] == ["second", "fourth", "third"]
    wait_for(lambda: "second (ahead of it)" in getattr(entry("third"), "text", ""), 60,
             "a run behind another on the same GPU does not say it waits for it")
    panel.refresh()
    qtbot.waitUntil(lambda: "second (ahead of it)" in cell(panel, 2, 2), timeout=60_000)
    assert "run first" in cell(panel, 0, 2)
    assert cli(["queue"]) == 0  # the command line lists the same
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].split()[:3] == ["1", second.entry.id, "second:"] and "run first" in listed[0]
    panel.select(fourth.entry.id)
    asked: list[str] = []
    answer_question(qtbot, "Cancel the run", asked)  # the panel asks first
    with qtbot.waitSignal(panel.changed, timeout=60_000):
        panel.cancel_button.click()
    assert asked == ["Cancel the queued run?"]
    assert [q.entry.name for q in panel.runs] == ["second", "third"]
    cancel_queued(third.entry.id)
    with pytest.raises(QueueError, match=r"No run .* is queued"):
        cancel_queued(third.entry.id)
    assert [q.entry.name for q in queued_runs()] == ["second"]

    record = running("first")
    assert record is not None
    ended = stop(record)
    assert ended.state is RunState.STOPPED
    wait_for(lambda: running("second") is not None and not queued_runs(), 60,
             "the second run did not start when the first ended")
    started = running("second")
    assert started is not None and ended.ended is not None
    assert started.created >= ended.ended
    assert Path(started.bundle).parent == tmp_path / "queued"
    assert [r.name for r in list_rows() if r.run_id == started.run_id] == ["second"]
    assert stop(started).state is RunState.STOPPED
    wait_for(lambda: queue_pid() is None, 60, "the queue's process did not end")


def test_a_damaged_queue_file_is_refused_with_what_to_do_and_kept(
        qtbot: QtBot, stub_python: Callable[..., str],
        capsys: pytest.CaptureFixture[str]) -> None:
    path = queue_dir() / "queue.json"
    path.parent.mkdir(parents=True)
    damaged = '{"schema": 1, "entries": [{"id": "q1", "plan": {"run_name": "a"}}, {"id"'
    path.write_text(damaged)
    with pytest.raises(QueueError) as caught:
        enqueue(gpu_plan("late", stub_python()))
    text = str(caught.value)
    assert str(path) in text and "damaged" in text and f"mv {path} {path}.damaged" in text
    with pytest.raises(QueueError):
        queued_runs()
    assert RunQueue(queue_dir()).serve() == 2  # the queue's process starts nothing
    assert cli(["queue"]) == 2 and f"mv {path} {path}.damaged" in capsys.readouterr().err
    panel = RunQueuePanel()  # the Runs page says it
    qtbot.addWidget(panel)
    panel.refresh()
    qtbot.waitUntil(lambda: "damaged" in panel.message.text(), timeout=60_000)
    assert not panel.isHidden() and f"mv {path}" in panel.message.text()
    assert path.read_text() == damaged  # nothing lost


def test_the_queue_order_pure() -> None:
    from dtgui.core.runs.queue_file import EVERY_GPU

    a = QueueEntry("a", {}, claims=(("local", 0),))
    b = QueueEntry("b", {}, claims=(("local", 1),))
    c = QueueEntry("c", {}, claims=(("local", EVERY_GPU),))
    assert ahead_of([a, b, c], 1) is None and ahead_of([a, b, c], 2) is a
    assert [e.id for e in moved([a, b, c], "c", -5)] == ["c", "a", "b"]
    assert [e.id for e in moved([a, b, c], "a", 1)] == ["b", "a", "c"]


def test_a_bundle_run_holds_its_machine_a_run_that_cannot_start_lets_the_next_start(
        tmp_path: Path, queue_ended: None, stub_python: Callable[..., str],
        capsys: pytest.CaptureFixture[str]) -> None:
    python = stub_python(step_seconds=0.2)
    # `dtgui run A`: a bundle outside the runs directory, its record in it
    first = launch_bundle(render_bundle(cpu_plan("A", python), tmp_path / "A"))
    assert first.record is not None
    folder = Path(first.record.bundle).resolve()
    assert folder.parent != runs_dir().resolve()  # not in the runs folder: in its register
    assert folder in outside_runs()
    assert [Path(r.bundle).resolve() for r in RunHistory().live()] == [folder]
    assert [Path(r.bundle).resolve() for r in RunHistory().running()] == [folder]  # listed
    # `dtgui queue add B` waits for it
    exported = render_bundle(cpu_plan("B", python), tmp_path / "B").path
    assert cli(["queue", "add", str(exported)]) == 0
    said = capsys.readouterr().out
    assert "waits for run A on this machine" in said, said
    # and the queue says the same at once (one text, written when it was queued)
    assert entry("B") is not None and getattr(entry("B"), "text", "") == "run A on this machine"
    assert cli(["queue"]) == 0
    assert "B: run A on this machine" in capsys.readouterr().out
    assert cli(["run", "--when-free", str(exported)]) == 2  # one folder, one run at a time
    assert "is queued already, as q" in capsys.readouterr().err
    # a model-file run queued, moved ahead of B by its name; then its model file is deleted
    project = tmp_path / "project"
    project.mkdir()
    model = (project / "model.py").resolve()
    model.write_text("def build_model(): ...\n")
    enqueue(cpu_plan("M", python, model=ModelFile(str(model))))
    assert cli(["queue", "up", "M"]) == 0
    wait_for(lambda: "run A on this machine" in getattr(entry("M"), "text", ""), 60,
             "the queued run does not say it waits for the bundle's run")
    assert [q.entry.name for q in queued_runs()] == ["M", "B"]
    assert "M (ahead of it)" in getattr(entry("B"), "text", "")
    model.unlink()

    # the queue's process killed while it starts B (as a kill in its launch leaves it): the
    # next dtgui command starts another, which puts B back in its place
    killed = queue_pid()
    assert killed is not None
    os.kill(killed, 9)
    wait_for(lambda: queue_pid() is None, 60, "the killed queue process is still there")
    change_queue(queue_dir(), lambda entries: [
        with_state(e, STARTING, started=time.time()) if e.name == "B" else e
        for e in entries])
    assert cli(["queue"]) == 0
    wait_for(lambda: queue_pid() not in (None, killed) and "M (ahead of it)" in getattr(
        entry("B"), "text", ""), 60, "the queue was not recovered")
    assert running("B") is None

    first.request_stop()
    assert first.wait(60), "the bundle's run did not stop"
    assert first.record.ended is not None
    # M cannot start: said with its cause, naming the file; B, next, starts
    wait_for(lambda: running("B") is not None and entry("B") is None, 60,
             "the run after the failed one did not start")
    started = running("B")
    assert started is not None and started.bundle == str(exported)
    assert started.created - first.record.ended < start_limit(5)
    failed = entry("M")
    assert failed is not None and failed.entry.state == FAILED
    cause = f"model file {model} does not exist"
    assert failed.text.startswith("could not start: ") and cause in failed.text
    assert cli(["queue"]) == 0
    listed = capsys.readouterr().out
    assert "M: could not start: " in listed and cause in listed
    assert cli(["queue", "cancel", "M"]) == 0 and not queued_runs()
    assert stop(started).state is RunState.STOPPED
    wait_for(lambda: queue_pid() is None, 60, "the queue's process did not end")


def test_a_launch_a_queue_process_left_is_settled(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """What a queue's process that ended while it launched runs leaves: a failed launch's
    record (could not start, its reason), a cancelled launch that recorded nothing (it
    leaves), and one cancelled that never got that far; cancelling a launch under way
    marks it, a name given twice is refused."""
    folder, runs_root = tmp_path / "queue", tmp_path / "runs"
    started = 1000.0
    record = RunRecord(run_id="x", run_name="x", bundle=str(runs_root / "x"), created=2000.0)
    record.end(RunState.FAILED, "Not launched: port 4321 is taken on this machine", None)
    record.save()
    plan = Plan(run_name="x").to_dict()
    entries = [QueueEntry("q1", plan, runs_root=str(runs_root), state=STARTING,
                          started=started),
               QueueEntry("q2", {**plan, "run_name": "y"}, runs_root=str(runs_root),
                          state=CANCELLED, started=started),
               QueueEntry("q3", {**plan, "run_name": "z"}, runs_root=str(runs_root))]
    change_queue(folder, lambda _: entries)
    RunQueue(folder).settle()
    after = queued_runs(folder)
    assert [(q.entry.id, q.entry.state) for q in after] == [("q1", FAILED), ("q3", "waiting")]
    assert after[0].text == "could not start: Not launched: port 4321 is taken on this machine"
    # a launch under way cancelled: marked, and a queue process asked for, to settle it
    # should none run (here none is started: these plans would train)
    asked: list[Path] = []

    def start(_self: object, folder: Path, *_: object, **__: object) -> int:
        asked.append(folder)
        return 1

    monkeypatch.setattr(type(QUEUE_PROCESS), "start", start)
    change_queue(folder, lambda entries: [with_state(e, STARTING) for e in entries])
    assert cancel_queued("z", folder).id == "q3" and asked == [folder]
    assert queued_runs(folder)[1].text.startswith("cancelled: stopped as soon as")
    change_queue(folder, lambda entries: [*entries, entries[1]])
    with pytest.raises(QueueError, match="2 queued runs are named z"):
        cancel_queued("z", folder)


def test_a_queued_run_whose_machine_or_bundle_is_gone_could_not_start(
        tmp_path: Path) -> None:
    """A run placed on a machine no longer registered, a bundle moved away: each ends
    "could not start" with the cause at the queue's next look, which starts nothing."""
    folder = tmp_path / "queue"
    local = place_local(Plan(run_name="away", strategy=Strategy.ONE_DEVICE,
                             replicas_per_task=1))
    away = local.with_changes(tasks=tuple(dataclasses.replace(t, machine="gpubox")
                                          for t in local.tasks))
    gone = tmp_path / "moved-bundle"
    change_queue(folder, lambda _: [
        QueueEntry("q1", away.to_dict()),
        QueueEntry("q2", Plan(run_name="b").to_dict(), bundle=str(gone))])
    queue = RunQueue(folder)
    assert queue.look() and queue.look()
    assert not queue.look()  # nothing waits: the process would end
    (first, second) = queued_runs(folder)
    assert first.text == ("could not start: the machine gpubox is not registered any more "
                          "(add it again on the Machines panel, then queue the run again)")
    assert second.text == f"could not start: {gone} is not a dtgui bundle: it has no plan.json"


class _ClosedPipe:
    """stdout whose reader went away (`dtgui queue | head -0`)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_pipe_ends_the_cli_quietly(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdout", _ClosedPipe())
    assert cli(["queue"]) == 0
    assert capsys.readouterr().err == ""


def test_a_bundle_whose_run_already_ran_is_not_queued(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = render_bundle(cpu_plan("done", "python3"), tmp_path / "done").path
    RunRecord("done-1", "done", str(bundle), state=RunState.FINISHED).save()
    assert cli(["run", "--when-free", str(bundle)]) == 2
    said = capsys.readouterr().err
    assert "already ran (state finished)" in said, said
    assert f"dtgui runs export {bundle} NEWDIR" in said and f"dtgui resume {bundle}" in said
    assert queued_runs() == []  # nothing queued
