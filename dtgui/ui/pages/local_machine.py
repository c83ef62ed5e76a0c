"""The panel 'This machine' (the computer dtgui runs on): CPU, RAM, GPUs (NVML) and what
TensorFlow can use, side by side. The registered remote machines are `ui.machines.panel`."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.machines.hardware import MachineFacts, TfView, detect_local
from dtgui.launch.checks.tf_view_memory import local_tf_view
from dtgui.ui.workers import error_message, run_in_thread


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


class LocalMachinePanel(QWidget):
    """Detects this machine in the background and shows the result; emits `factsChanged`."""

    factsChanged = Signal(object)  # MachineFacts

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.facts: MachineFacts | None = None
        self._probing = False
        self._fresh = False  # this detection asks TensorFlow again (Refresh)

        box = QGroupBox("This machine")
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        self._host = QLabel("…")
        self._cpu = QLabel("…")
        self._cpu.setWordWrap(True)
        self._ram = QLabel("…")
        self._tf = QLabel("asking TensorFlow…")
        self._tf.setWordWrap(True)
        for label, widget in (("Host", self._host), ("CPU", self._cpu), ("Memory", self._ram),
                              ("TensorFlow", self._tf)):
            form.addRow(label, widget)

        self._gpus = QTableWidget(0, 5)
        self._gpus.setObjectName("gpuTable")
        self._gpus.setHorizontalHeaderLabels(["GPU", "Memory", "Util", "Driver", "CC"])
        self._gpus.verticalHeader().setVisible(False)
        self._gpus.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self._gpus.horizontalHeader().setStretchLastSection(True)
        self._gpus.setMaximumHeight(110)
        self._no_gpu = QLabel("No GPU found by the NVIDIA driver.")
        self._no_gpu.setObjectName("muted")
        self._no_gpu.setWordWrap(True)

        self._explanation = QLabel("")
        self._explanation.setWordWrap(True)
        self._explanation.setObjectName("explanation")
        self._explanation.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self._refresh = QPushButton("Refresh")
        self._refresh.clicked.connect(lambda: self.refresh(fresh=True))
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self._refresh)

        inner = QVBoxLayout()
        inner.addLayout(form)
        inner.addWidget(QLabel("<b>GPUs</b> (NVIDIA driver)"))
        inner.addWidget(self._gpus)
        inner.addWidget(self._no_gpu)
        inner.addWidget(self._explanation)
        inner.addLayout(buttons)
        box.setLayout(inner)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(box)
        outer.addStretch(1)
        self._gpus.hide()

    def refresh(self, fresh: bool = False) -> None:
        """Detect this machine; what TensorFlow sees is the view remembered for the same
        installation and GPUs (`tf_view_memory`), asked again when `fresh` (Refresh)."""
        if self._probing:
            return
        self._probing = True
        self._fresh = fresh
        self._refresh.setEnabled(False)
        self._tf.setText("asking TensorFlow (in a subprocess)…")
        run_in_thread(detect_local, self._on_detected, self._on_error, context=self)

    def _on_detected(self, facts: MachineFacts) -> None:
        self.facts = facts
        self._host.setText(f"{facts.hostname} — {facts.os_name}, Python {facts.python}")
        self._cpu.setText(f"{facts.cpu_model} ({facts.cpu_cores} cores)")
        self._ram.setText(_gib(facts.ram_total))
        self._show_gpus(facts)
        self._explanation.setText(facts.explanation())
        self.factsChanged.emit(facts)
        gpus, fresh = tuple(facts.gpus), self._fresh
        run_in_thread(lambda: local_tf_view(gpus, fresh), self._on_tf, self._on_error,
                      context=self)

    def _on_tf(self, view: TfView) -> None:
        self._probing = False
        self._refresh.setEnabled(True)
        if self.facts is None:
            return
        self.facts.tf = view
        if view.version:
            gpus = f"{len(view.gpus)} GPU(s)" if view.gpus else "CPU only"
            cuda = f", built for CUDA {view.cuda_version}" if view.built_with_cuda else ""
            self._tf.setText(f"{view.version} — sees {gpus}{cuda}")
        else:
            self._tf.setText(f"not usable: {view.error}")
        self._explanation.setText(self.facts.explanation())
        self.factsChanged.emit(self.facts)

    def _on_error(self, exc: BaseException) -> None:
        self._probing = False
        self._refresh.setEnabled(True)
        self._explanation.setText(f"Detection failed: {error_message(exc)}")

    def _show_gpus(self, facts: MachineFacts) -> None:
        self._gpus.setRowCount(len(facts.gpus))
        for row, gpu in enumerate(facts.gpus):
            cells = [f"{gpu.index}: {gpu.name}", f"{_gib(gpu.mem_used)} / {_gib(gpu.mem_total)}",
                     f"{gpu.util:.0f}%", gpu.driver, gpu.compute_capability]
            for col, text in enumerate(cells):
                self._gpus.setItem(row, col, QTableWidgetItem(text))
        self._gpus.setVisible(bool(facts.gpus))
        self._no_gpu.setVisible(not facts.gpus)
        if not facts.gpus and facts.nvml_error:
            self._no_gpu.setText(f"No GPU found by the NVIDIA driver ({facts.nvml_error}).")
