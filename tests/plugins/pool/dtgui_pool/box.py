"""The pool's wizard box: which pool a run goes to."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtWidgets import QComboBox, QLabel, QVBoxLayout, QWidget

from dtgui.core.machines.registry import Machine
from dtgui.core.plans.plan import Plan
from dtgui.core.target_job import TargetJob
from dtgui.ui.wizard.target_box import TargetBox
from dtgui_pool.driver import place_in_pool
from dtgui_pool.job import KIND, PoolJob, pool_settings


class PoolBox(TargetBox):
    kind = KIND
    title = "Pool:"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.combo = QComboBox()
        self.combo.setObjectName("poolCombo")
        self.combo.currentIndexChanged.connect(lambda _i: self.changed.emit())
        self.combo.activated.connect(lambda _i: self.chosen.emit())
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("The run's tasks run in the pool's folder, on this machine."))
        self.refilled: PoolJob | None = None

    def chooser(self) -> QWidget:
        return self.combo

    def set_machines(self, machines: Sequence[Machine]) -> None:
        self.combo.clear()
        for machine in machines:
            if pool_settings(machine) is not None:
                self.combo.addItem(machine.name)
        self.offered.emit()

    def available(self) -> bool:
        return self.combo.count() > 0

    def tip(self) -> str:
        return "" if self.available() else "No pool is registered (Machines > Add)."

    def review(self, draft: Plan) -> tuple[Plan, TargetJob, list[str]]:
        pool = self.combo.currentText()
        job = PoolJob(pool)
        return place_in_pool(draft, pool), job, [] if pool else ["Choose a pool."]

    def task_where(self, job: TargetJob, rank: int) -> str:
        return f"in the pool, rank {rank}"

    def refill(self, job: TargetJob) -> bool:
        if not isinstance(job, PoolJob):
            return False
        self.refilled = job
        index = self.combo.findText(job.pool)
        if index >= 0:
            self.combo.setCurrentIndex(index)
        return True
