"""A kind of target is its driver, its wizard box and one registration line each: a kind
registered by this test alone (a driver in `DRIVERS`, a box in `BOXES`) is offered by the
wizard's target choice, its box's job is what the review page holds, and RunSession launches
it through that driver; no other file knows the kind (pytest-qt, the stub training task)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot
from test_launch_pipeline import ProcessesHere

from dtgui.core.machines.registry import Machine
from dtgui.core.plans.placement import place_local
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.records import RunRecord
from dtgui.launch.drivers import DRIVERS
from dtgui.launch.runs.policy import RunPolicy
from dtgui.launch.targets import Target
from dtgui.ui.run_session import RunSession
from dtgui.ui.wizard import RunWizard
from dtgui.ui.wizard.strategy_list import ROLE_TAGLINE
from dtgui.ui.wizard.target_box import TargetBox
from dtgui.ui.wizard.target_boxes import BOXES

pytestmark = pytest.mark.gui


@dataclass(frozen=True)
class HereJob:
    """What the test kind's box makes: the interpreter its tasks run with."""

    python: str


class HereBox(TargetBox):
    """The test kind's wizard box: no fields, a job of the interpreter it was given."""

    kind = ProcessesHere.kind
    title = "Processes here (test)"
    python = ""

    def review(self, draft: Plan) -> tuple[Plan, object, list[str]]:
        return place_local(draft), HereJob(self.python), [] if self.python else ["no Python"]

    def task_where(self, job: object, rank: int) -> str:
        return f"here, rank {rank}"

    def note(self, placed: Plan, job: object) -> str:
        return f"{len(placed.tasks)} processes here, as the test kind starts them."


class HereDriver(ProcessesHere):
    """The test kind's driver, which knows its box's job."""

    def target_of_job(self, job: object, machines: Mapping[str, Machine]) -> Target | None:
        if not isinstance(job, HereJob):
            return None
        return Target(python=job.python, kind=self.kind)


def test_a_kind_registered_with_a_driver_and_a_box_is_offered_and_launched(
        qtbot: QtBot, tmp_path: Path, stub_python: Callable[..., str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    driver = HereDriver()
    monkeypatch.setitem(DRIVERS, driver.kind, driver)
    monkeypatch.setitem(BOXES, HereBox.kind, HereBox)
    wizard = RunWizard(None, Plan(run_name="here", strategy=Strategy.MULTI_WORKER_MIRRORED,
                                  workers=2, replicas_per_task=1, steps=3, steps_per_epoch=3,
                                  checkpoint_every=0))
    qtbot.addWidget(wizard)
    wizard.set_machines([])
    wizard.show()
    for _ in range(3):
        wizard.next()
    review = wizard.review_page
    box = review.machines_box
    radio = box.radios[HereBox.kind]
    assert radio.text() == HereBox.title and radio.isEnabled() and radio.isVisible()
    here = box.boxes[HereBox.kind]
    assert isinstance(here, HereBox)
    radio.setChecked(True)  # no Python yet: the box's problem stops the launch
    assert review.job == HereJob("") and not review.isComplete()
    assert "no Python" in review.warnings.text()
    here.python = stub_python()
    review.replan()
    assert review.job == HereJob(here.python) and review.isComplete()
    assert here.isVisible() and not box.inner.isVisible()
    assert review.note.text() == "2 processes here, as the test kind starts them."
    assert "here, rank 1" in review.task_list.item(1).data(ROLE_TAGLINE)
    assert not review.tabs.isTabVisible(2)  # the box submits no file of its own

    session = RunSession()
    failed: list[str] = []
    session.failed.connect(failed.append)
    with qtbot.waitSignal(session.started, timeout=60_000):
        session.launch(wizard.plan(), tmp_path / "runs", RunPolicy(), review.job)
    assert failed == []
    source = session.source
    assert source is not None
    bundle = source.bundle.path
    assert (bundle / "processes-here.txt").read_text(encoding="utf-8") == "local"
    assert [call for call, _ in driver.calls] == ["check", "place", "render", "executor"]
    qtbot.waitUntil(lambda: source.finished, timeout=60_000)
    assert source.state == "finished", source.message
    record = RunRecord.load(bundle)
    assert [(m.name, m.kind) for m in record.machines] == [("local", driver.kind)]
