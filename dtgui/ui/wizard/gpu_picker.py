"""Which GPUs each machine of a placed GPU plan may use (part of the review page's machines box).

One row per machine in use: a check box per GPU the machine's facts list ("0: <name> (<mem>
GiB)", all checked at first), or a note when no GPU is known there. The facts come from the
Machines panel's last probes (remote machines) and NVML (this machine, "local"). What is
unchecked is remembered per machine, so GPUs that appear later start checked.

A GPU a running sweep's trial holds (the sweeps' register, `dtgui.launch.gpus.holds`, read
off the UI thread whenever the facts or the machines shown change) is shown busy, "busy:
trial 4 of sweep X", unchecked and disabled: a run launched now takes only the free ones. The
register is read again every BUSY_REFRESH_MS while machines are shown, so a GPU is offered
again soon after its trial has ended. A run launched when free (`set_wait_for_busy`, the review
page's choice) may take a busy GPU: it waits in the queue until the GPU is free.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QCheckBox, QGridLayout, QLabel, QWidget

from dtgui.core.machines.hardware import GpuInfo
from dtgui.core.plans.placement import machine_key
from dtgui.core.plans.plan import LOCAL_MACHINE
from dtgui.launch.gpus.holds import busy_gpus, read_holds
from dtgui.ui.workers import run_in_thread

from .common import muted

PER_LINE = 3  # GPU check boxes per line (a machine with 8 GPUs takes 3 lines)
BUSY_REFRESH_MS = 10_000  # how often the sweeps' register is read again while shown


def machine_text(name: str) -> str:
    return "this machine" if name == LOCAL_MACHINE else name


def gpu_text(gpu: GpuInfo) -> str:
    return f"{gpu.index}: {gpu.name} ({gpu.mem_total / 2**30:.1f} GiB)"


class GpuPicker(QWidget):
    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("gpuPicker")
        self._facts: dict[str, list[GpuInfo]] = {}
        self._unchecked: dict[str, set[int]] = {}
        self._remembered: dict[str, set[int]] = {}  # machine -> GPUs the last plan used
        self._busy: dict[str, dict[int, str]] = {}  # machine -> GPU -> the trial holding it
        self._boxes: dict[str, list[tuple[int, QCheckBox]]] = {}
        self._notes: dict[str, QLabel] = {}
        self._shown: tuple[str, ...] | None = None
        self._wait_for_busy = False  # busy GPUs offered: the run waits for them
        self.grid = QGridLayout(self)
        self.grid.setContentsMargins(0, 6, 0, 0)
        self.grid.setHorizontalSpacing(10)
        self.grid.setVerticalSpacing(4)
        self.grid.setColumnStretch(1, 1)
        self._refresh = QTimer(self)
        self._refresh.setInterval(BUSY_REFRESH_MS)
        self._refresh.timeout.connect(self.refresh_busy)
        self.setVisible(False)

    def set_facts(self, facts: Mapping[str, Sequence[GpuInfo]]) -> None:
        """Machine name -> its GPUs ("local" or "" = this machine). Replaces what was known."""
        self._facts = {machine_key(name): list(gpus) for name, gpus in facts.items()}
        shown, self._shown = self._shown, None
        if shown is not None:
            self.show_machines(list(shown))
        self.refresh_busy()

    def refresh_busy(self) -> None:
        """Read again which GPUs running sweeps' trials hold (in a worker)."""
        run_in_thread(lambda: busy_gpus(read_holds()), self.set_busy, lambda _exc: None,
                      context=self)

    def set_busy(self, busy: Mapping[str, Mapping[int, str]]) -> None:
        """Machine -> GPU -> who holds it ("trial 4 of sweep X"): shown busy, not offered."""
        wanted = {machine_key(m): dict(gpus) for m, gpus in busy.items() if gpus}
        if wanted == self._busy:
            return
        self._busy = wanted
        shown, self._shown = self._shown, None
        if shown is not None:
            self._render(shown)
            self.changed.emit()  # the GPUs offered changed

    def set_wait_for_busy(self, wait: bool) -> None:
        """Offer the busy GPUs too (the run waits in the queue until they are free)."""
        if wait == self._wait_for_busy:
            return
        self._wait_for_busy = wait
        shown, self._shown = self._shown, None
        if shown is not None:
            self._render(shown)
            self.changed.emit()

    def busy(self, machine: str) -> dict[int, str]:
        """The GPUs of `machine` shown busy, and who holds each."""
        return dict(self._busy.get(machine_key(machine), {}))

    def facts(self, machine: str) -> list[GpuInfo]:
        return list(self._facts.get(machine_key(machine), ()))

    def show_machines(self, machines: Sequence[str]) -> None:
        """One row per machine, in order; an empty list hides the picker."""
        wanted = tuple(dict.fromkeys(machine_key(m) for m in machines))
        self.setVisible(bool(wanted))
        if wanted == self._shown:
            return
        self._render(wanted)
        if wanted:
            self.refresh_busy()
            self._refresh.start()
        else:
            self._refresh.stop()

    def _render(self, wanted: tuple[str, ...]) -> None:
        self._shown = wanted
        while self.grid.count():
            item = self.grid.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.hide()  # at once: deleteLater waits for the event loop
                widget.deleteLater()
        self._boxes.clear()
        self._notes.clear()
        for row, name in enumerate(wanted):
            self.grid.addWidget(QLabel(f"GPUs on {machine_text(name)}:"), row, 0,
                                Qt.AlignmentFlag.AlignTop)
            gpus = self._facts.get(name, [])
            if not gpus:
                where = ("this machine (none detected here)" if name == LOCAL_MACHINE
                         else f"{name} (probe it in Machines)")
                note = muted(f"no GPU known on {where}")
                note.setObjectName(f"gpuNote:{name}")
                self.grid.addWidget(note, row, 1)
                self._notes[name] = note
                continue
            holder = QWidget()
            lines = QGridLayout(holder)
            lines.setContentsMargins(0, 0, 0, 0)
            lines.setHorizontalSpacing(14)
            lines.setVerticalSpacing(2)
            lines.setColumnStretch(PER_LINE, 1)
            if name in self._remembered and name not in self._unchecked:
                self._unchecked[name] = {g.index for g in gpus} - self._remembered[name]
            boxes = []
            busy = self._busy.get(name, {})
            for n, gpu in enumerate(gpus):
                box = QCheckBox(gpu_text(gpu))
                box.setObjectName(f"gpu:{name}:{gpu.index}")
                box.setChecked(gpu.index not in self._unchecked.get(name, set()))
                box.setToolTip(f"Let the tasks on {machine_text(name)} use GPU {gpu.index} "
                               "(CUDA_VISIBLE_DEVICES, PCI bus order).")
                if gpu.index in busy and self._wait_for_busy:
                    box.setText(f"{gpu_text(gpu)} — busy: {busy[gpu.index]}; the run waits")
                elif gpu.index in busy:  # a sweep's trial runs there: left to it
                    box.setText(f"{gpu_text(gpu)} — busy: {busy[gpu.index]}")
                    box.setChecked(False)
                    box.setEnabled(False)
                    box.setToolTip(f"GPU {gpu.index} on {machine_text(name)} is in use by "
                                   f"{busy[gpu.index]}: a run launched now leaves it to the "
                                   "sweep.")
                box.toggled.connect(lambda on, n=name, i=gpu.index: self._toggled(n, i, on))
                lines.addWidget(box, *divmod(n, PER_LINE))
                boxes.append((gpu.index, box))
            self.grid.addWidget(holder, row, 1)
            self._boxes[name] = boxes

    def remember(self, choice: Mapping[str, Iterable[int]]) -> None:
        """Start from the GPUs a remembered plan used on each machine (the others unchecked,
        once that machine's GPUs are known)."""
        self._remembered = {machine_key(m): set(gpus) for m, gpus in choice.items() if gpus}

    def shown(self) -> list[str]:
        return list(self._shown or ())

    def note(self, machine: str) -> str:
        """The "no GPU known" text shown for a machine ("" when it has GPUs or is not shown)."""
        label = self._notes.get(machine_key(machine))
        return label.text() if label is not None else ""

    def chosen(self) -> dict[str, list[int]]:
        """Machine -> the checked GPUs, for every shown machine whose GPUs are known."""
        return {name: [i for i, box in boxes if box.isChecked()]
                for name, boxes in self._boxes.items()}

    def set_checked(self, machine: str, indices: Sequence[int]) -> None:
        """Check exactly `indices` on `machine` (as if clicked)."""
        for index, box in self._boxes.get(machine_key(machine), []):
            box.setChecked(index in indices)

    def _toggled(self, machine: str, index: int, on: bool) -> None:
        unchecked = self._unchecked.setdefault(machine, set())
        if on:
            unchecked.discard(index)
        else:
            unchecked.add(index)
        self.changed.emit()
