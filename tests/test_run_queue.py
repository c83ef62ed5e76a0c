"""Single runs that wait for a busy GPU ("Launch when free"): the queue's own process (real,
detached) reads this machine's GPU through the machine probe and a fake NVML replaying the
H100 captures (tests/fake_nvml), and starts each queued run through the one pipeline (the
stub training child) when its GPU is free: first when another process leaves the GPU, then,
for a second run on the only GPU, when the first run ends. The queue is reordered and
cancelled while a run waits; a damaged queue file is refused with what to do, and kept."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fakes import FAKE_NVML, wait_for
from pytestqt.qtbot import QtBot

from dtgui.cli.main import main as cli
from dtgui.core.plans.placement import place_local
from dtgui.core.plans.plan import DeviceKind, MachineAccess, Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.queue_file import QueueEntry, QueueError, ahead_of, moved
from dtgui.core.runs.records import RunHistory, RunRecord
from dtgui.core.runs.run_state import RunState
from dtgui.launch.queue.run_queue import (
    QUEUE_PROCESS,
    QueuedRun,
    cancel_queued,
    enqueue,
    queue_dir,
    queue_pid,
    queued_runs,
)
from dtgui.launch.queue.run_queue_process import RunQueue
from dtgui.launch.run_admin import list_rows
from dtgui.launch.start.pipeline import reattach
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
    return next((r for r in RunHistory().running() if r.run_name == name), None)


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
    for record in RunHistory().running():
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
    with qtbot.waitSignal(panel.changed, timeout=60_000):
        panel.cancel_button.click()
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
