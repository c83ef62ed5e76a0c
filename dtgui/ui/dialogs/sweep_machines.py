"""The sweep dialog's "Trials run on": this machine and the registered ones, each trial run
whole on one of those checked (on a GPU run setup, with how many of its GPUs were free by the
machines panel's last figures: nothing is asked here), or a machine whose kind owns it (a
Slurm cluster), checked alone: then each trial is a job there, made by the kind's driver
(`dtgui.launch.drivers.trial_job`)."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QListWidget, QListWidgetItem, QWidget

from dtgui.core.machines.hardware import GpuInfo
from dtgui.core.machines.registry import Machine
from dtgui.core.plans.plan import LOCAL_MACHINE, Plan
from dtgui.core.target_job import TargetJob
from dtgui.launch.drivers import Refused, owner_of, trial_job
from dtgui.launch.gpus.free_slots import GpuReport, free_groups, per_trial_gpus

JOB_ROLE = Qt.ItemDataRole.UserRole + 1  # an item whose trials are jobs there


class TrialMachines(QListWidget):
    """The machines a trial of `plan` may run on, this one checked; `machines`: the
    registered ones besides it, `gpus`: machine ("local" = this one) -> its GPUs by its last
    probe, `job_machines`: the registered machines a kind owns. A run setup that places its
    tasks on registered machines runs every trial there: the list is disabled."""

    def __init__(self, plan: Plan, machines: list[str] | None = None,
                 gpus: dict[str, list[GpuInfo]] | None = None,
                 job_machines: Sequence[Machine] = (), parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plan = plan
        self.gpus = dict(gpus or {})
        self.owners = {m.name: d for m in job_machines if (d := owner_of(m)) is not None}
        self.job_machines = {m.name: m for m in job_machines if m.name in self.owners}
        self.setToolTip(
            "Each trial runs whole on one of the checked machines (on a GPU run setup, a trial "
            "per free GPU, or group of GPUs, of each); more at once than free places wait. "
            "A cluster with a scheduler (Slurm), checked alone: each trial is a job of its own "
            "in its queue, placed by its scheduler, as many queued at once as asked")
        names = [LOCAL_MACHINE, *(n for n in machines or [] if n not in self.job_machines)]
        for name in [*names, *self.job_machines]:
            text = ("this machine" if name == LOCAL_MACHINE else name) + self._gpu_text(name)
            if name in self.job_machines:
                text = self.owners[name].trial_target_text(self.job_machines[name])
            item = QListWidgetItem(text)
            item.setData(Qt.ItemDataRole.UserRole, name)
            item.setData(JOB_ROLE, name in self.job_machines)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked if name == LOCAL_MACHINE
                               else Qt.CheckState.Unchecked)
            self.addItem(item)
        self.setMaximumHeight(22 * min(4, self.count()) + 8)
        placed = bool(plan.tasks) and any(not t.is_local for t in plan.tasks)
        self.setEnabled(not placed)
        if placed:
            self.setToolTip("This run setup places its tasks on registered machines: every "
                            "trial runs there")

    def checked(self) -> list[str]:
        """The names checked (machines, and those whose trials are jobs); none while the
        list is disabled."""
        if not self.isEnabled():
            return []
        return [str(item.data(Qt.ItemDataRole.UserRole))
                for item in (self.item(i) for i in range(self.count()))
                if item is not None and item.checkState() == Qt.CheckState.Checked]

    def trial_on(self) -> list[str]:
        """The machines checked, when they are not just this one (then: [], the default)."""
        names = [n for n in self.checked() if n not in self.job_machines]
        return [] if names == [LOCAL_MACHINE] else names

    def trial_job(self) -> tuple[TargetJob | None, str]:
        """The job each trial is when a machine whose trials are jobs is checked (its
        driver's `trial_job`), else None; and why its defaults make no job ("" when they
        do)."""
        chosen = [n for n in self.checked() if n in self.job_machines]
        if not chosen:
            return None, ""
        try:
            return trial_job(self.plan, self.job_machines[chosen[0]]), ""
        except Refused as exc:
            return None, str(exc)

    def problems(self) -> list[str]:
        """What is wrong with the machines checked."""
        out = []
        if self.isEnabled() and not self.checked():
            out.append("Check at least one machine for the trials to run on.")
        checked = self.checked()
        jobs_on = [n for n in checked if n in self.job_machines]
        if jobs_on and len(checked) > 1:
            out.append(f"{jobs_on[0]} takes every trial (its scheduler places each trial's "
                       "job): check it alone.")
        return out + [why for why in [self.trial_job()[1]] if why]

    def capacity_text(self, asked: int) -> str:
        """For a GPU run setup: how many trials the checked machines' free GPUs take at once,
        when fewer than `asked` ("" otherwise, or when their GPUs are not known yet)."""
        plan = self.plan
        names = self.trial_on() or [LOCAL_MACHINE]
        if self.trial_job()[0] is not None:  # its scheduler places the trials' jobs
            return ""
        if not plan.on_gpu or not self.isEnabled() or any(n not in self.gpus for n in names):
            return ""
        per_trial = per_trial_gpus(plan)
        groups = len(free_groups({n: GpuReport(self.gpus[n]) for n in names}, per_trial))
        if groups >= asked:
            return ""
        return (f"{asked} trials at once were asked, but the machines checked have {groups} "
                f"group(s) of {per_trial} free GPU(s) by their last figures: the other trials "
                "will wait for one.")

    def _gpu_text(self, name: str) -> str:
        """" — 3 of 4 GPUs free" for a GPU run setup, by the machine's last figures."""
        if not self.plan.on_gpu or name not in self.gpus:
            return ""
        gpus = self.gpus[name]
        return f" — {len(GpuReport(gpus).idle())} of {len(gpus)} GPU(s) free" if gpus \
            else " — no GPU found"
