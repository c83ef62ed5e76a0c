"""The dashboard's memory and network card: each task's devices with their peak memory (near
the limit in amber, with what to change), and the link between the run's machines as the
cluster doctor last measured it, with the all-reduce time that gives.

Fed from the dashboard's snapshot (`Snapshot.memory`, folded by `RunCurves`); the doctor's
kept measurements are read in the thread pool when the run's machines change, never on the
UI thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.measure.device_use import (
    IDLE_UTIL,
    DeviceBusy,
    DeviceUse,
    traffic_line,
    traffic_text,
    unhelped_summary,
)
from dtgui.core.measure.memory import NEAR_LIMIT, MemoryPeaks, gib, warning_text
from dtgui.core.measure.network_pairs import (
    LINKS_FILE,
    REFERENCE_PARAMS,
    LinkTest,
    age_text,
    allreduce_text,
    asymmetric,
    asymmetry_text,
    between,
    directions,
    link_text,
    load_links,
    pair_text,
    ring_allreduce_seconds,
    seconds_text,
    size_text,
    slowest,
)
from dtgui.core.run_tasks import TaskState, task_key
from dtgui.core.settings import data_dir
from dtgui.ui.workers import run_in_thread

COLUMNS = ("Task", "Device", "Peak", "Limit", "Use", "Busy / idle")
NEAR_BG, NEAR_FG = "#fef3c7", "#92400e"


def network_text(links: Sequence[LinkTest], machines: Sequence[str], workers: int,
                 gradient_bytes: int = 0, *, here: bool = False, servers: bool = False) -> str:
    """What the doctor measured between the registered `machines` (`here`: this machine takes
    part too), and the all-reduce time of the model's gradients (of a 10 M-parameter model
    when the size is unknown) over the slowest link (`servers`: parameter servers, no
    all-reduce)."""
    if len(machines) + here < 2:
        return "Network: the run's tasks share one machine."
    if len(machines) < 2:
        return ("Network: the doctor measures links between registered machines; this run "
                "uses this machine and " + ", ".join(machines) + ".")
    found = between(links, machines)
    worst = slowest(found)
    if worst is None:
        return ("Network: not measured between " + ", ".join(machines)
                + " — run Machines → Doctor… on them to see each link and its all-reduce time.")
    pairs = "; ".join(pair_text(*pair) for pair in directions(found))
    uneven = [slow for pair in directions(found) if (slow := asymmetric(*pair)) is not None]
    if uneven:
        pairs += " — " + "; ".join(f"{k.source} → {k.target} is the slow way" for k in uneven)
    size = gradient_bytes or REFERENCE_PARAMS * 4
    whose = "" if gradient_bytes else " (of 10 M float32 parameters)"
    seconds = ring_allreduce_seconds(size, workers, worst.bandwidth, worst.rtt_ms)
    if servers:
        return f"Network: {pairs} (doctor, {age_text(worst)})."
    return (f"Network: {pairs} (doctor, {age_text(worst)}). Expected all-reduce{whose}: "
            f"{seconds_text(seconds)} a step over {workers} workers "
            f"({size_text(size)}).")


def network_details(links: Sequence[LinkTest], machines: Sequence[str], workers: int,
                    gradient_bytes: int = 0) -> str:
    """The network line's tooltip: each link in full, and the formula."""
    found = [k for k in between(links, machines) if k.ok]
    worst = slowest(found)
    if worst is None:
        return ""
    size = gradient_bytes or REFERENCE_PARAMS * 4
    lines = [f"{k.source} → {k.target}: {link_text(k)}, {age_text(k)}" for k in found]
    for forward, backward in directions(found):
        slow = asymmetric(forward, backward)
        if slow is not None and backward is not None:
            lines.append(asymmetry_text(slow, backward if slow is forward else forward))
    lines.append(f"Expected {allreduce_text(size, workers, worst)} (the slowest link).")
    lines.append("Ring all-reduce: 2(n-1)/n × bytes / bandwidth + 2(n-1) × round trip / 2.")
    return "\n".join(lines)


TRAFFIC_HELP = ("Each machine's network traffic: its interfaces but loopback, sampled every "
                "2 s by the tasks' telemetry; the share is of the slowest link the doctor "
                "measured from that machine.")


def busy_cell(busy: DeviceBusy | None) -> str:
    """'71 % / 22 %': mean use, share of the time idle ('' before enough samples)."""
    if busy is None or not busy.text:
        return ""
    return f"{busy.mean_util:.0f} % / {busy.idle_share * 100:.0f} %"


def machine_of(tasks: Mapping[str, TaskState]) -> dict[str, str]:
    """task -> its machine ("this machine" for a task here)."""
    return {name: t.machine or "this machine" for name, t in tasks.items()}


class MemoryPanel(QWidget):
    """A table of every task's devices with their memory, a warning line, a network line."""

    # the network line when the doctor measured the run's links ("" otherwise): the split
    # card shows it beside the communication share
    networkMeasured = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("memoryPanel")
        self.warning = QLabel()
        self.warning.setObjectName("memoryWarning")
        self.warning.setWordWrap(True)
        self.warning.setStyleSheet(f"color: {NEAR_FG}; background: {NEAR_BG}; padding: 4px;")
        self.warning.hide()
        self.network = QLabel("Network: —")
        self.network.setObjectName("networkLine")
        self.network.setWordWrap(True)
        self.network.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.traffic = QLabel("")
        self.traffic.setObjectName("trafficLine")
        self.traffic.setWordWrap(True)
        self.traffic.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.traffic.hide()
        for label in (self.network, self.traffic):  # wrapped lines keep their height
            label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("memoryTable")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setShowGrid(False)
        self.table.setWordWrap(False)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        header = self.table.horizontalHeader()
        header.setHighlightSections(False)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        for col in range(len(COLUMNS)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.table.setToolTip(
            "Peak: the most memory the task held (GPU: the GPU's used memory at its fullest; "
            "CPU: the task's resident memory). Use: the most of the limit in use at once "
            f"(CPU: by the whole machine); at {NEAR_LIMIT:.0%} a warning says what to change. "
            f"Busy / idle: the device's mean utilisation while the task trained, and how "
            f"often it was idle (under {IDLE_UTIL:.0f} %): a GPU that idles waits for "
            f"something.")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addWidget(self.network)
        layout.addWidget(self.traffic)
        layout.addWidget(self.warning)
        layout.addWidget(self.table, 1)
        self._links: list[LinkTest] = []
        self._machines: tuple[str, ...] = ()
        self._workers = 0
        self._here = self._servers = False
        self._bytes = 0
        self._wire_note = ""  # the gradients' compression, or why it fell back
        self._use = DeviceUse()  # the last traffic shown, again once the links are read
        self._task_states: Mapping[str, TaskState] = {}

    def update_memory(self, memory: MemoryPeaks, use: DeviceUse | None = None) -> None:
        """Each task's devices: memory, and how busy they were while training (`use`)."""
        busy = {(d.task, d.device): d for d in (use.devices() if use is not None else ())}
        # a task on GPUs shows them (its CPU entry only stands in when NVML fails)
        with_gpus = {d.task for d in memory.devices() if d.kind == "gpu"}
        devices = sorted((d for d in memory.devices()
                          if d.kind == "gpu" or d.task not in with_gpus),
                         key=lambda d: (not d.near_limit, task_key(d.task), d.device))
        self.table.setRowCount(len(devices))
        for r, d in enumerate(devices):
            seen = busy.get((d.task, d.device))
            cells = (d.task, d.device, gib(d.peak),
                     gib(d.total) if d.total else "?",
                     f"{d.fraction:.0%}" if d.total else "?", busy_cell(seen))
            for c, text in enumerate(cells):
                item = self.table.item(r, c)
                if item is None:
                    item = QTableWidgetItem()
                    self.table.setItem(r, c, item)
                item.setText(text)
                if c >= 2:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight
                                          | Qt.AlignmentFlag.AlignVCenter)
                item.setBackground(QBrush(QColor(NEAR_BG)) if d.near_limit else QBrush())
                item.setForeground(QBrush(QColor(NEAR_FG)) if d.near_limit else QBrush())
                item.setToolTip(warning_text(d) if d.near_limit
                                else seen.text if c == 5 and seen is not None
                                else f"{d.name}: {gib(d.used)} now")
        near = memory.near_limit()
        self.warning.setVisible(bool(near))
        self.warning.setText("⚠ " + "\n⚠ ".join(warning_text(d) for d in near))

    def update_tasks(self, tasks: Mapping[str, TaskState], gradient_bytes: int = 0,
                     wire_note: str = "") -> None:
        """The run's machines (from its tasks), its gradients' size and what the card says of
        their compression; the doctor's links are read again when the machines change."""
        if wire_note != self._wire_note:
            self._wire_note = wire_note
            self._show_network()
        machines = tuple(sorted({t.machine for t in tasks.values() if t.machine}))
        workers = sum(1 for name in tasks if name.startswith(("worker", "chief")))
        here = any(not t.machine for t in tasks.values())
        servers = any(name.startswith("ps") for name in tasks)
        shown = (machines, workers, here, servers, gradient_bytes)
        if shown == (self._machines, self._workers, self._here, self._servers, self._bytes):
            return
        self._machines, self._workers, self._here, self._servers, self._bytes = shown
        self._show_network()
        if len(machines) >= 2:
            run_in_thread(lambda: load_links(data_dir() / LINKS_FILE), self._loaded,
                          context=self)

    def update_traffic(self, use: DeviceUse, tasks: Mapping[str, TaskState]) -> None:
        """Each machine's traffic, against its measured link, for a run over several
        machines (one machine's tasks talk over loopback, which is not counted)."""
        self._use, self._task_states = use, tasks
        if len(self._machines) + self._here < 2:
            self.traffic.hide()
            return
        traffic = use.traffic(machine_of(tasks))
        text = traffic_line(traffic, self._links)
        self.traffic.setText(text)
        self.traffic.setToolTip(traffic_text(traffic, self._links) + "\n\n" + TRAFFIC_HELP
                                if text else "")
        self.traffic.setVisible(bool(text))

    def unhelped(self, use: DeviceUse, tasks: Mapping[str, TaskState]) -> str:
        """What the samples say of a run that gives no split (dtgui.core.measure.device_use)."""
        return unhelped_summary(use.devices(), use.traffic(machine_of(tasks)), self._links)

    def _loaded(self, links: list[LinkTest]) -> None:
        self._links = links
        self._show_network()
        self.update_traffic(self._use, self._task_states)  # its share of the links now

    def _show_network(self) -> None:
        workers = max(2, self._workers)
        text = network_text(self._links, self._machines, workers, self._bytes,
                            here=self._here, servers=self._servers)
        self.network.setText(f"{text} {self._wire_note}" if self._wire_note else text)
        measured = len(self._machines) >= 2 and slowest(between(self._links,
                                                                self._machines)) is not None
        self.networkMeasured.emit(text if measured else "")
        self.network.setToolTip(network_details(self._links, self._machines, workers,
                                                self._bytes))
