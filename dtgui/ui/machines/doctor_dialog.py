"""The cluster doctor: pick machines and a port, run, read one table with a fix per problem.

Connecting (with host-key and password questions), probing, the port and reachability
checks all run in the background; the dialog shows progress and never blocks.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.machines.doctor import (
    DEFAULT_PORT,
    FAIL,
    OK,
    WARN,
    Check,
    PortTest,
    ReachTest,
    build_checks,
    summary,
)
from dtgui.core.machines.hardware import MachineFacts
from dtgui.core.machines.registry import Machine, MachineRegistry, RemoteFacts
from dtgui.core.measure.network_pairs import LINKS_FILE, TRANSFER_BYTES, LinkTest, save_links
from dtgui.core.settings import data_dir
from dtgui.remote.doctor_checks import measure_links, run_doctor_checks
from dtgui.remote.probe import probe
from dtgui.ui.machines.common import plain_buttons, repolish
from dtgui.ui.machines.connect_flow import Attempt, ConnectFlow, Outcome
from dtgui.ui.workers import Worker, create_worker, error_message

# what the doctor measured between the machines: their ports, who reaches whom, the links
Checked = tuple[list[PortTest], list[ReachTest], list[LinkTest]]

COLUMNS = ["Machine", "Check", "Status", "Detail", "Suggested fix"]
STATUS_TEXT = {OK: "✓ OK", WARN: "⚠ Warning", FAIL: "✗ Problem"}
STATUS_COLOR = {OK: "#15803d", WARN: "#b45309", FAIL: "#b91c1c"}
ROW_TINT = {OK: "", WARN: "#fffbeb", FAIL: "#fef2f2"}


class DoctorDialog(QDialog):
    finishedRun = Signal(list)  # [Check]: the table's rows, once a run has ended

    def __init__(self, registry: MachineRegistry, local: MachineFacts | None,
                 chosen: list[str] | None = None, *, keyring_ok: bool = True,
                 keyring_note: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.registry = registry
        self.local = local
        self.checks: list[Check] = []
        self.running = False
        self.setWindowTitle("Cluster doctor")
        self.resize(1240, 720)

        title = QLabel("Cluster doctor")
        title.setObjectName("pageTitle")
        intro = QLabel(
            "Checks that the chosen machines can train together: the same TensorFlow as this "
            "machine, Python and GPU drivers, a free port on each, whether every machine "
            "reaches that port on every other one (tested from the machines themselves), and "
            f"each pair's link on that port: round trips and a {TRANSFER_BYTES >> 20} MiB "
            "transfer, with the all-reduce time it gives."
        )
        intro.setWordWrap(True)
        intro.setObjectName("muted")

        self.machine_boxes: dict[str, QCheckBox] = {}
        boxes = QWidget()
        boxes.setObjectName("machineBoxes")
        boxes_layout = QHBoxLayout(boxes)
        boxes_layout.setContentsMargins(8, 4, 8, 4)
        boxes_layout.setSpacing(18)
        for machine in registry.machines():
            box = QCheckBox(machine.name)
            box.setToolTip(machine.address)
            box.setChecked(chosen is None or machine.name in chosen)
            box.toggled.connect(self._update)
            self.machine_boxes[machine.name] = box
            boxes_layout.addWidget(box)
        boxes_layout.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidget(boxes)
        scroll.setWidgetResizable(True)
        scroll.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setFixedHeight(boxes.sizeHint().height() + 6)
        scroll.setStyleSheet("QScrollArea, QWidget#machineBoxes { background: #ffffff; }"
                             " QScrollArea { border: 1px solid #dde1e6; border-radius: 4px; }")
        self.port_spin = QSpinBox()
        self.port_spin.setRange(1024, 65535)
        self.port_spin.setValue(DEFAULT_PORT)
        self.port_spin.setToolTip("The port the TensorFlow tasks will listen on")
        self.run_button = QPushButton("Run checks")
        self.run_button.setObjectName("primaryButton")
        self.run_button.clicked.connect(self.run)
        pick = QHBoxLayout()
        pick.addWidget(QLabel("Machines"))
        pick.addWidget(scroll, 1)
        pick.addSpacing(12)
        pick.addWidget(QLabel("Port"))
        pick.addWidget(self.port_spin)
        pick.addSpacing(12)
        pick.addWidget(self.run_button)

        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setMaximumHeight(6)
        self.progress.setTextVisible(False)
        self.progress.hide()
        self.status_label = QLabel("Choose the machines and the port, then Run checks.")
        self.status_label.setWordWrap(True)
        self.only_problems = QCheckBox("Only problems")
        self.only_problems.toggled.connect(lambda _: self._fill())
        status_row = QHBoxLayout()
        status_row.addWidget(self.status_label, 1)
        status_row.addWidget(self.only_problems)

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("doctorTable")
        self.table.setStyleSheet("QTableWidget#doctorTable::item { padding: 3px 4px; }")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setWordWrap(True)
        self.table.setShowGrid(False)
        self.table.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        header = self.table.horizontalHeader()
        header.setHighlightSections(False)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        for col, width in enumerate((120, 130, 96)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Interactive)
            self.table.setColumnWidth(col, width)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Interactive)
        self.table.setColumnWidth(3, 400)
        header.setSectionResizeMode(4, QHeaderView.ResizeMode.Stretch)
        header.sectionResized.connect(lambda *_: self.table.resizeRowsToContents())

        buttons = plain_buttons(QDialogButtonBox(QDialogButtonBox.StandardButton.Close))
        buttons.rejected.connect(self.reject)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 14)
        layout.setSpacing(10)
        layout.addWidget(title)
        layout.addWidget(intro)
        layout.addLayout(pick)
        layout.addWidget(self.progress)
        layout.addLayout(status_row)
        layout.addWidget(self.table, 1)
        layout.addWidget(buttons)

        self.flow = ConnectFlow(self, lambda: self.registry, keyring_ok=keyring_ok,
                                keyring_note=keyring_note)
        self._update()

    # -- state -----------------------------------------------------------------------------------
    def chosen(self) -> list[Machine]:
        names = [n for n, box in self.machine_boxes.items() if box.isChecked()]
        return [self.registry.get(n) for n in names if n in self.registry]

    def set_chosen(self, names: list[str]) -> None:
        for name, box in self.machine_boxes.items():
            box.setChecked(name in names)

    def _update(self, *_: object) -> None:
        self.run_button.setEnabled(not self.running and bool(self.chosen()))

    def _show_progress(self, text: str) -> None:
        if self.running:
            self.status_label.setText(text)

    # -- running ---------------------------------------------------------------------------------
    def run(self) -> None:
        machines = self.chosen()
        if self.running or not machines:
            return
        self.running = True
        self.port = port = self.port_spin.value()
        self.checks = []
        self._fill()
        self.progress.show()
        self._update()
        repolish(self.status_label, "")
        self.status_label.setText(f"Connecting to {len(machines)} machine(s)…")
        def action(attempt: Attempt) -> tuple[Any, RemoteFacts]:
            client = attempt.connect()
            try:
                attempt.report("probing Python, TensorFlow and GPUs…")
                return client, probe(client, attempt.machine.interpreter)
            except BaseException:
                client.close()
                raise

        batch = self.flow.start(machines, action)
        batch.progress.connect(lambda name, text: self._show_progress(f"{name}: {text}"))
        batch.done.connect(lambda outcomes: self._connected(outcomes, port))

    def _connected(self, outcomes: list[Outcome], port: int) -> None:
        clients = {o.machine.name: o.value[0] for o in outcomes if o.ok}
        facts = {o.machine.name: o.value[1] for o in outcomes if o.ok}
        errors = {o.machine.name: o.message for o in outcomes if not o.ok}
        machines = {o.machine.name: o.machine for o in outcomes}
        pairs = len(clients) * (len(clients) - 1)
        self._show_progress(f"Testing port {port} on {len(clients)} machine(s) and "
                            f"{pairs} path(s) between them…")

        def work(worker: Worker[Checked]) -> Checked:
            try:
                ports, reach = run_doctor_checks(clients, machines, port,
                                                 on_progress=worker.report)
                links = measure_links(clients, machines, port, reach,
                                      on_progress=worker.report)
            finally:
                for client in clients.values():
                    client.close()
            save_links(data_dir() / LINKS_FILE, [k for k in links if k.ok])  # for dashboards
            return ports, reach, links

        def done(result: Checked) -> None:
            ports, reach, links = result
            self._finish(build_checks(self.local, facts, port, ports, reach, errors, links))

        def failed(exc: BaseException) -> None:
            self._finish(build_checks(self.local, facts, port, errors=errors),
                         error_message(exc))

        create_worker(work, on_done=done, on_error=failed, on_progress=self._show_progress,
                      context=self)

    def _finish(self, checks: list[Check], error: str = "") -> None:
        self.running = False
        self.progress.hide()
        self.checks = checks
        self._fill()
        fails, warns = summary(checks)
        if error:
            text, name = f"The checks stopped: {error}", "errorText"
        elif fails or warns:
            parts = [f"{n} {w}{'s' if n != 1 else ''}" for n, w in
                     ((fails, "problem"), (warns, "warning")) if n]
            text = (f"{' and '.join(parts)} found — "
                    + ("fix the red rows before training on these machines."
                       if fails else "training can run; consider the fixes."))
            name = "errorText" if fails else ""
        else:
            text = (f"✓ All {len(checks)} checks passed: these machines can train together on "
                    f"port {self.port}.")
            name = "okText"
        if not error and not any(c.topic.startswith("Reach") for c in checks):
            text += " (Choose two or more machines that answer to test the paths between them.)"
        repolish(self.status_label, name)
        self.status_label.setText(text)
        self._update()
        self.finishedRun.emit(checks)

    def _fill(self) -> None:
        rows = [c for c in self.checks if c.status != OK or not self.only_problems.isChecked()]
        self.table.setRowCount(len(rows))
        bold = QFont(self.table.font())
        bold.setBold(True)
        for r, check in enumerate(rows):
            cells = [check.machine, check.topic, STATUS_TEXT.get(check.status, check.status),
                     check.detail, check.fix]
            tint = ROW_TINT.get(check.status, "")
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                item.setTextAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
                if tint:
                    item.setBackground(QBrush(QColor(tint)))
                if c == 2:
                    item.setForeground(QBrush(QColor(STATUS_COLOR.get(check.status, "#111827"))))
                    item.setFont(bold)
                self.table.setItem(r, c, item)
        self.table.resizeRowsToContents()

    def status_of(self, machine: str, topic_prefix: str) -> Check | None:
        """The first row for `machine` whose topic starts with `topic_prefix` (tests, scripts)."""
        return next((c for c in self.checks
                     if c.machine == machine and c.topic.startswith(topic_prefix)), None)
