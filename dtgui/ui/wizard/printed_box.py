"""The script fields' "Metrics from printed lines": the built-in reading of `name: value`
pairs, the user's own patterns, which tasks are read, and a live preview of what sample lines
give (pasted, or the end of the script's last run). The preview runs the supervisor's own
parser (dtgui.worker.printed_metrics), so it shows what a run will plot."""

from __future__ import annotations

import html
from pathlib import Path

import shiboken6
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.plans.plan import MetricsTasks, ScriptModel
from dtgui.ui.workers import error_message, run_in_thread
from dtgui.worker.printed_metrics import compile_patterns, describe, preview

from .common import label, monospace, muted

PREVIEW_LINES = 12
TASK_CHOICES = (("chief", "main task"), ("all", "every task"))
SAMPLE_HINT = "Epoch: 0, accuracy: 0.327567, train_loss: 1.820119."


class PrintedMetricsBox(QWidget):
    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.defaults_check = QCheckBox("Curves from the lines it prints (name: 1.2, name=1.2)")
        self.defaults_check.setToolTip(
            "Several pairs a line: `name: 1.2`, `name=1.2`, `name is 1.2`, or `name 1.2` where "
            "the line is only pairs. A line counts when it names a known metric (loss, "
            "accuracy, lr, ...) or a step or epoch: `Number of devices: 1` is prose. `Test "
            "Loss` is its own curve; only a training loss is the run's loss. The x is the "
            "step, iter or batch in the same line, else its epoch (an epoch axis), else the "
            "last line's x, else a line count. `Epoch 3/10` moves the progress. A metric the "
            "script's TensorBoard files or report() give is taken from those alone.")
        self.defaults_check.setChecked(True)
        self.tasks_combo = QComboBox()
        self.tasks_combo.setToolTip("Which tasks' lines are read: the main task (the chief, "
                                    "else worker 0), or every task (a curve each)")
        for key, text in TASK_CHOICES:
            self.tasks_combo.addItem(text, key)
        self.patterns_edit = QPlainTextEdit()
        self.patterns_edit.setObjectName("metricPatterns")
        self.patterns_edit.setPlaceholderText(
            r"Your patterns, one a line (named groups: step/epoch, and values), e.g. "
            r"\[it (?P<step>\d+)\] loss=(?P<loss>\S+) lr=(?P<lr>\S+)")
        self.patterns_edit.setFont(monospace())
        self.patterns_edit.setFixedHeight(44)
        self.sample_edit = QPlainTextEdit()
        self.sample_edit.setObjectName("metricSamples")
        self.sample_edit.setPlaceholderText(f"Sample lines to try them on, e.g. {SAMPLE_HINT}")
        self.sample_edit.setFont(monospace())
        self.sample_edit.setFixedHeight(54)
        self.last_run_button = QPushButton("From its last run")
        self.last_run_button.setToolTip("The end of what the main task printed in the newest "
                                        "run of this entry script")
        self.preview_label = label(name="metricPreview", selectable=True)
        self.preview_label.setTextFormat(Qt.TextFormat.RichText)
        self.preview_label.setFont(monospace())
        self.note = muted()
        self.more_button = QToolButton()
        self.more_button.setText("Patterns, try")
        self.more_button.setToolTip("Your own patterns, and sample lines to try them on")
        self.more_button.setCheckable(True)
        self.more_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.more_button.setArrowType(Qt.ArrowType.RightArrow)

        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(4)
        top = QHBoxLayout()
        top.addWidget(self.defaults_check, 1)
        top.addWidget(self.tasks_combo)
        top.addWidget(self.more_button)
        outer.addLayout(top)
        self.more = QWidget()  # the patterns and the live try, shown on demand
        more = QVBoxLayout(self.more)
        more.setContentsMargins(0, 0, 0, 0)
        more.setSpacing(4)
        more.addWidget(self.patterns_edit)
        samples = QHBoxLayout()
        samples.addWidget(self.sample_edit, 1)
        samples.addWidget(self.last_run_button, 0, Qt.AlignmentFlag.AlignTop)
        more.addLayout(samples)
        more.addWidget(self.preview_label)
        more.addWidget(self.note)
        outer.addWidget(self.more)
        self.more.setVisible(False)

        self.entry = ""  # the script's entry and project folder (the script box sets them)
        self.project = ""
        self._generation = 0
        self.defaults_check.toggled.connect(lambda *_: self._changed())
        self.tasks_combo.currentIndexChanged.connect(lambda *_: self._changed())
        self.patterns_edit.textChanged.connect(self._changed)
        self.sample_edit.textChanged.connect(self.show_preview)
        self.last_run_button.clicked.connect(self.take_last_run)
        self.more_button.toggled.connect(self.show_more)
        self.show_preview()

    def show_more(self, shown: bool = True) -> None:
        """Show (or hide) the patterns and the live try."""
        if self.more_button.isChecked() != shown:
            self.more_button.setChecked(shown)  # toggled: back here
            return
        self.more.setVisible(shown)
        self.more_button.setArrowType(Qt.ArrowType.DownArrow if shown
                                      else Qt.ArrowType.RightArrow)

    # -- the plan ----------------------------------------------------------------------
    def load(self, script: ScriptModel) -> None:
        self.defaults_check.setChecked(script.printed_metrics)
        self.patterns_edit.setPlainText("\n".join(script.patterns))
        if script.patterns:
            self.show_more()
        index = self.tasks_combo.findData(str(script.metrics_tasks))
        self.tasks_combo.setCurrentIndex(max(0, index))

    def patterns(self) -> tuple[str, ...]:
        return tuple(p for p in self.patterns_edit.toPlainText().splitlines() if p.strip())

    def values(self) -> tuple[bool, tuple[str, ...], MetricsTasks]:
        """The script model's printed_metrics, patterns and metrics_tasks."""
        return (self.defaults_check.isChecked(), self.patterns(),
                MetricsTasks.named(self.tasks_combo.currentData()) or MetricsTasks.CHIEF)

    def problems(self) -> list[str]:
        return [f"Printed metrics: {p}" for p in compile_patterns(self.patterns())[1]]

    # -- the preview -------------------------------------------------------------------
    def _changed(self) -> None:
        self.show_preview()
        self.changed.emit()

    def show_preview(self) -> None:
        lines = [ln for ln in self.sample_edit.toPlainText().splitlines() if ln.strip()]
        if not lines:
            self.preview_label.setText("")
            self.preview_label.setVisible(False)
            return
        compiled, _ = compile_patterns(self.patterns())
        rows = []
        for line, result in preview(lines[-PREVIEW_LINES:], [p.pattern for p in compiled],
                                    defaults=self.defaults_check.isChecked()):
            said = describe(result)
            how = f"pattern {result.pattern + 1}" if result.pattern >= 0 else "built-in"
            shown = html.escape(line if len(line) <= 70 else line[:67] + "…")
            if said:
                rows.append(f"{shown}<br>&nbsp;&nbsp;<span style='color:#188038'>→ "
                            f"{html.escape(said)} ({how})</span>")
            else:
                rows.append(f"{shown}<br>&nbsp;&nbsp;<span style='color:#6b7280'>→ nothing"
                            "</span>")
        self.preview_label.setText("<br>".join(rows))
        self.preview_label.setVisible(True)

    def take_last_run(self) -> None:
        """Fill the samples with the end of the newest run of this script (disk: a thread)."""
        from dtgui.core.scripts.script_samples import last_run_output

        entry, project = self.entry, self.project
        if not entry:
            self.note.setText("Choose the entry script first.")
            return
        self._generation += 1
        generation = self._generation
        self.note.setText("Reading its last run…")
        run_in_thread(lambda: last_run_output(entry, project=Path(project) if project else None),
                      lambda found: self._took(generation, found),
                      lambda exc: self._took(generation, ([], ""), error_message(exc)))

    def _took(self, generation: int, found: tuple[list[str], str], error: str = "") -> None:
        if not shiboken6.isValid(self) or generation != self._generation:
            return
        lines, run = found
        if lines:
            self.sample_edit.setPlainText("\n".join(lines))
            self.note.setText(f"The last {len(lines)} lines of run {run}.")
        else:
            self.note.setText(error or f"No run of {self.entry} was found: paste lines it "
                              "prints instead.")
