"""The dashboard's non-plot parts: the run header, the per-task table and the log view.

All of them are fed from the UI thread with data already in memory (a `Snapshot`, or the
new log lines of a `LiveRun`); none of them touches a file or a process.
"""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import (
    QColor,
    QFontDatabase,
    QIcon,
    QPainter,
    QPixmap,
    QTextCursor,
    QTextOption,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.live_run import LiveRun
from dtgui.core.plans.plan import is_local_machine
from dtgui.core.run_tasks import TaskState, task_key
from dtgui.core.runs.run_state import RunState
from dtgui.core.scripts.script_progress import ScriptProgress
from dtgui.core.task_logs import LOG_LINES_KEPT
from dtgui.ui.pages.state_colours import STATE_COLOURS
from dtgui.ui.plots.plot_base import card_rows, format_elapsed

FAILED_ROW_BG = {False: "#fce8e6", True: "#4c1f1d"}
FAILED_ROW_FG = {False: "#a50e0e", True: "#f6aea9"}
SLOW_ROW_BG = {False: "#fef7e0", True: "#3d3214"}  # a straggler's row (amber)
SLOW_ROW_FG = {False: "#b06000", True: "#fdd663"}
THIS_MACHINE = "this machine"


def machine_label(machine: str) -> str:
    """A task's machine as shown: its registered name, or "this machine"."""
    return THIS_MACHINE if is_local_machine(machine) else machine


def badge_icon(colour: str) -> QIcon:
    """A filled dot: the straggler badge in the task column."""
    pix = QPixmap(12, 12)
    pix.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pix)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(QColor(colour))
    painter.drawEllipse(1, 1, 10, 10)
    painter.end()
    return QIcon(pix)


def _button(text: str, name: str, tip: str) -> QPushButton:
    """One of the header's buttons: its text, its name (the style sheet's), its tooltip."""
    button = QPushButton(text)
    button.setObjectName(name)
    button.setToolTip(tip)
    return button


class RunHeader(QFrame):
    """Run name, strategy, coloured state, progress, epoch metrics, elapsed time, Stop."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        outer = card_rows(self, "header", (12, 8, 12, 8), 6)
        top = QHBoxLayout()
        top.setSpacing(12)
        self.name_label = QLabel("No run")
        self.name_label.setObjectName("pageTitle")
        font = self.name_label.font()
        font.setPointSizeF(font.pointSizeF() + 4)
        font.setBold(True)
        self.name_label.setFont(font)
        self.name_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.strategy_label = QLabel("")
        self.strategy_label.setObjectName("muted")
        self.state_label = QLabel("")
        self.state_label.setObjectName("runState")
        bold = self.state_label.font()
        bold.setBold(True)
        self.state_label.setFont(bold)
        self.elapsed_label = QLabel("")
        self.elapsed_label.setObjectName("muted")
        self.elapsed_label.setToolTip("Time since the dashboard started following this run")
        self.stop_button = _button("Stop", "stopButton", "Stop every task of this run")
        self.stop_button.setEnabled(False)
        self.stop_button.setMinimumWidth(96)
        self.profile_button = _button(
            "Profile N steps…", "profileButton", "Capture TensorFlow's profiler on every task "
            "over the next N steps, into the run's TensorBoard folder (dtgui profile RUN "
            "--steps N)")
        self.profile_button.setVisible(False)
        self.profile_label = QLabel("")
        self.profile_label.setObjectName("profileState")
        self.profile_label.setTextFormat(Qt.TextFormat.RichText)
        self.profile_label.setWordWrap(True)  # a refusal's reason is a sentence
        self.profile_label.setVisible(False)
        self.resume_button = _button(
            "Resume", "resumeButton", "Continue this run from its newest checkpoint, on its "
            "machines, to its last step (dtgui resume RUN --steps N trains longer)")
        self.resume_button.setVisible(False)
        # the run's results where they are kept: one button, so the header keeps its width
        self.open_in_button = QPushButton("Open in")
        self.open_in_button.setToolTip("This run in MLflow's UI or in TensorBoard")
        open_menu = QMenu(self.open_in_button)
        self.mlflow_action = open_menu.addAction("MLflow")
        self.tensorboard_action = open_menu.addAction("TensorBoard")
        self.open_in_button.setMenu(open_menu)
        self.open_in_button.setEnabled(False)
        for w in (self.name_label, self.strategy_label, self.state_label):
            top.addWidget(w)
        top.addStretch(1)
        top.addWidget(self.elapsed_label)
        top.addWidget(self.profile_button)
        top.addWidget(self.open_in_button)
        top.addWidget(self.resume_button)
        top.addWidget(self.stop_button)
        outer.addLayout(top)
        bottom = QHBoxLayout()
        bottom.setSpacing(12)
        self.progress = QProgressBar()
        self.progress.setObjectName("runProgress")
        self.progress.setTextVisible(False)
        self.progress.setFixedHeight(10)
        self.progress.setMinimumWidth(200)
        self.progress.setMaximumWidth(420)
        self.step_label = QLabel("")
        self.step_label.setObjectName("runStep")
        self.step_label.setTextFormat(Qt.TextFormat.RichText)
        self.epoch_label = QLabel("")
        self.epoch_label.setObjectName("runEpoch")
        self.epoch_label.setTextFormat(Qt.TextFormat.RichText)
        bottom.addWidget(self.progress, 2)
        bottom.addWidget(self.step_label)
        bottom.addSpacing(8)
        bottom.addWidget(self.epoch_label, 3)
        bottom.addStretch(1)
        outer.addLayout(bottom)
        outer.addWidget(self.profile_label)  # a line of its own while a profile has news
        self.message_label = QLabel("")
        self.message_label.setObjectName("errorText")
        self.message_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.message_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.message_label.setVisible(False)
        outer.addWidget(self.message_label)
        self.state = ""
        self.set_progress(0, 0)

    def set_profile(self, text: str) -> None:
        """What a profile asked of the run says (rich text; "": nothing to say)."""
        self.profile_label.setText(text)
        self.profile_label.setVisible(bool(text))

    def set_run(self, name: str, strategy: str) -> None:
        self.name_label.setText(name or "run")
        self.strategy_label.setText(strategy.replace("_", " ") if strategy else "")
        self.strategy_label.setToolTip(f"tf.distribute strategy: {strategy}" if strategy else "")

    def set_state(self, state: str, message: str = "") -> None:
        if state != self.state:
            self.state = state
            colour = STATE_COLOURS.get(state, "#5f6368")
            self.state_label.setText(f"\u25cf {state}")
            self.state_label.setStyleSheet(f"color: {colour};")
            self.state_label.setProperty("state", state)
        self.state_label.setToolTip(message)
        # a failed run's error; a running run's note (a Slurm job waiting in the queue: why)
        show = bool(message) and state in (RunState.FAILED, RunState.RUNNING, RunState.LOST)
        if show and (self.message_label.text(), self.message_label.property("state")) != (
                message, state):
            self.message_label.setText(message)
            self.message_label.setToolTip(message)
            self.message_label.setProperty("state", state)
            colour = STATE_COLOURS[RunState.FAILED] if state == RunState.FAILED else "#92400e"
            self.message_label.setStyleSheet(f"color: {colour};")
        if self.message_label.isVisibleTo(self) != show:
            self.message_label.setVisible(show)

    def set_progress(self, step: int, total: int, starting: str = "") -> None:
        """The step reached of `total` (0: unknown); `starting`: what a run with no step yet
        does instead ("starting: loading TensorFlow…")."""
        if starting:
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
            text = f"<i>{starting}</i>"
        elif total > 0:
            self.progress.setRange(0, total)
            self.progress.setValue(min(step, total))
            text = f"step <b>{step:,}</b> / {total:,} &nbsp;({100 * step / total:.0f}%)"
        else:
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
            text = f"step <b>{step:,}</b>"
        self.progress.setFormat(f"step {step} of {total}" if total > 0 else f"step {step}")
        self.step_label.setText(text)
        self.epoch_label.setVisible(True)

    def set_script_progress(self, progress: ScriptProgress) -> None:
        """A user's own script: how far it says it is, and the time left at its pace."""
        fraction, left = progress.fraction, progress.seconds_left()
        self.progress.setRange(0, 1000 if fraction is not None else 1)
        self.progress.setValue(round(1000 * fraction) if fraction is not None else 0)
        text = progress.text() or "no progress told"
        self.progress.setFormat(text)
        if fraction is not None:
            text += f" &nbsp;({100 * fraction:.0f}%)"
        if left is not None and fraction is not None and fraction < 1:
            text += f" &nbsp;· about {format_elapsed(left)} left"
        self.step_label.setText(text)
        self.epoch_label.setVisible(progress.unit != "epoch")  # said here already

    def set_script(self, summary: str, details: str) -> None:
        """What a script run is (entry, arguments, Keras) beside the strategy; all of it in
        the tooltip."""
        strategy = self.strategy_label.text().split(" · ")[0]
        self.strategy_label.setText(f"{strategy} · {summary}" if summary else strategy)
        self.strategy_label.setToolTip(details)

    def set_epoch(self, epoch: int, metrics: dict[str, float], step: int = 0,
                  per_epoch: int = 0) -> None:
        """The epoch the run is in and the last ended one's numbers (`epoch_text`)."""
        self.epoch_label.setText(epoch_text(epoch, metrics, step, per_epoch))

    def set_elapsed(self, seconds: float) -> None:
        text = f"elapsed {format_elapsed(seconds)}"
        if text != self.elapsed_label.text():
            self.elapsed_label.setText(text)


def epoch_text(epoch: int, metrics: Mapping[str, float], step: int = 0,
               per_epoch: int = 0) -> str:
    """The header's epoch: the one the run is in (`epoch`, counted from 1), how far into it
    when its steps per epoch are known, and the training numbers of the last epoch that
    ended (`metrics`, its `epoch` among them). An epoch's numbers come once it has ended, so
    a run that ends part-way through an epoch says that epoch's steps beside the last whole
    one's numbers."""
    if not epoch:
        return "epoch –"
    done = int(metrics.get("epoch", 0))
    vals = []
    if "loss" in metrics:
        vals.append(f"loss <b>{metrics['loss']:.4g}</b>")
    if "accuracy" in metrics:
        vals.append(f"accuracy <b>{100 * metrics['accuracy']:.1f}%</b>")
    numbers = ", ".join(vals)
    into = step - (epoch - 1) * per_epoch if per_epoch > 0 and step > 0 else 0
    if numbers and done == epoch:
        return f"epoch <b>{epoch}</b> ended: training {numbers}"
    current = f"epoch <b>{epoch}</b>" + (
        f" (step {into:,} of {per_epoch:,})" if 0 < into < per_epoch else "")
    if not numbers:
        return current
    ended = f"epoch {done}" if done else "the last epoch"
    return f"{current} &nbsp;·&nbsp; {ended} ended: training {numbers}"


# The Step of a task that trains no replica and reports no step of its own: a
# ParameterServer worker runs the steps its coordinator sends it, a parameter server holds
# variables; neither counts them
NO_STEPS = "\u2014"
NO_STEPS_TIP = ("This task reports no steps of its own: a ParameterServer worker runs the "
                "steps the coordinator (chief) sends it and a parameter server holds the "
                "variables. The run's step is the coordinator's.")


class TaskTable(QTableWidget):
    """One row per task: machine, status, step, replicas, exit code, error (failed rows in
    red, stragglers in amber with a "slow" badge). The Machine column shows only when a task
    runs on another machine, Exit and Error only when a task has one: a narrow pane gives
    its width to the columns that say something."""

    COLUMNS = ("Task", "Machine", "Status", "Step", "Replicas", "Exit", "Error")
    MACHINE, STATUS, STEP, EXIT, ERROR = 1, 2, 3, 5, 6
    NUMERIC = (3, 4, 5)
    taskActivated = Signal(str)

    def __init__(self, dark: bool = False, parent: QWidget | None = None) -> None:
        super().__init__(0, len(self.COLUMNS), parent)
        self.setObjectName("taskTable")
        self.dark = dark
        self.setHorizontalHeaderLabels(list(self.COLUMNS))
        self.verticalHeader().setVisible(False)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setAlternatingRowColors(True)
        self.setShowGrid(False)
        self.setWordWrap(False)
        header = self.horizontalHeader()
        header.setHighlightSections(False)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        for col in range(len(self.COLUMNS) - 1):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
            head = self.horizontalHeaderItem(col)
            if col in self.NUMERIC and head is not None:
                head.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        header.setSectionResizeMode(self.ERROR, QHeaderView.ResizeMode.Stretch)
        self.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        for col in (self.MACHINE, self.EXIT, self.ERROR):
            self.setColumnHidden(col, True)
        self._badge = badge_icon(SLOW_ROW_FG[dark])
        self._rows: dict[str, int] = {}
        self._shown: dict[str, TaskState] = {}
        self.cellDoubleClicked.connect(self._activated)

    @property
    def machine_column_shown(self) -> bool:
        return not self.isColumnHidden(self.MACHINE)

    def clear_tasks(self) -> None:
        self.setRowCount(0)
        self._rows.clear()
        self._shown.clear()
        for col in (self.MACHINE, self.EXIT, self.ERROR):
            self.setColumnHidden(col, True)

    def update_tasks(self, tasks: dict[str, TaskState]) -> None:
        if set(tasks) - set(self._rows):
            self._rows = {t: i for i, t in enumerate(sorted(set(tasks) | set(self._rows),
                                                            key=task_key))}
            self.setRowCount(len(self._rows))
            self._shown.clear()
        for task, state in tasks.items():
            before = self._shown.get(task)
            if before != state:
                self._fill_row(self._rows[task], state, before)
                self._shown[task] = state
        shown = self._shown.values()
        for col, wanted in ((self.MACHINE, any(not is_local_machine(s.machine) for s in shown)),
                            (self.EXIT, any(s.exit_shown for s in shown)),
                            (self.ERROR, any(s.error for s in shown))):
            if self.isColumnHidden(col) == wanted:
                self.setColumnHidden(col, not wanted)

    def _fill_row(self, row: int, st: TaskState, before: TaskState | None) -> None:
        slow = bool(st.straggler)
        status = f"{st.status} \u00b7 slow" if slow else st.status
        stepless = not st.step and not st.replicas and st.status != RunState.STARTING
        values = (st.task, machine_label(st.machine), status,
                  NO_STEPS if stepless else f"{st.step:,}",
                  str(st.replicas or ""), st.exit_shown,
                  st.error)
        failed = st.status == "failed"
        restyle = before is None or (before.status, before.error, before.straggler) != (
            st.status, st.error, st.straggler)
        tip = f"{st.task} failed: {st.error}" if failed and st.error else st.straggler
        for col, text in enumerate(values):
            item = self.item(row, col)
            if item is None:
                item = QTableWidgetItem()
                self.setItem(row, col, item)
                if col in self.NUMERIC:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight
                                          | Qt.AlignmentFlag.AlignVCenter)
            if item.text() != text:
                item.setText(text)
            if not restyle:
                continue
            item.setToolTip(tip or (st.error if col == self.ERROR else
                                    NO_STEPS_TIP if col == self.STEP and stepless else ""))
            if col == 0:
                item.setIcon(self._badge if slow and not failed else QIcon())
            if failed:
                item.setBackground(QColor(FAILED_ROW_BG[self.dark]))
                item.setForeground(QColor(FAILED_ROW_FG[self.dark]))
            elif slow:
                item.setBackground(QColor(SLOW_ROW_BG[self.dark]))
                item.setForeground(QColor(SLOW_ROW_FG[self.dark]))
            else:
                item.setData(Qt.ItemDataRole.BackgroundRole, None)
                colour = STATE_COLOURS.get(st.status) if col == self.STATUS else None
                item.setData(Qt.ItemDataRole.ForegroundRole, QColor(colour) if colour else None)

    def _activated(self, row: int, _col: int) -> None:
        item = self.item(row, 0)
        if item is not None:
            self.taskActivated.emit(item.text())


class LogView(QWidget):
    """The log of one task; appends only lines it has not shown; follows the end unless the
    user scrolled up."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("logView")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        bar = QHBoxLayout()
        label = QLabel("Log of")
        label.setObjectName("logTaskLabel")
        self.combo = QComboBox()
        self.combo.setObjectName("logTaskCombo")
        self.combo.setMinimumContentsLength(12)
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.combo.currentIndexChanged.connect(self._task_changed)
        self.count_label = QLabel("")
        self.count_label.setObjectName("logCount")
        self.all_lines = QCheckBox("all lines")
        self.all_lines.setObjectName("logAllLines")
        self.all_lines.setToolTip("Every line as the task wrote it, TensorFlow's own messages "
                                  "too (folded away and counted otherwise)")
        self.all_lines.toggled.connect(lambda _on: self._restart())
        bar.addWidget(label)
        bar.addWidget(self.combo)
        bar.addStretch(1)
        bar.addWidget(self.count_label)
        bar.addWidget(self.all_lines)
        layout.addLayout(bar)
        self.text = QPlainTextEdit()
        self.text.setObjectName("logText")
        self.text.setReadOnly(True)
        # wrapped: a line longer than the pane is read whole, never cut at its edge
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.text.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.text.setMaximumBlockCount(LOG_LINES_KEPT)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.text.setPlaceholderText("No output yet.")
        layout.addWidget(self.text, 1)
        self._metrics: LiveRun | None = None
        self._seen = 0

    @property
    def task(self) -> str:
        """The chosen task's id (the combo's text may add its machine)."""
        return str(self.combo.currentData() or "")

    def set_metrics(self, metrics: LiveRun | None) -> None:
        self._metrics = metrics
        self.combo.blockSignals(True)
        self.combo.clear()
        self.combo.blockSignals(False)
        self._restart()

    def set_tasks(self, tasks: list[str], machines: Mapping[str, str] | None = None) -> None:
        """The tasks to choose from; with `machines` (task -> machine) naming another machine,
        each entry shows its machine: "worker:1 (h3)"."""
        machines = machines or {}
        remote = any(not is_local_machine(machines.get(t, "")) for t in tasks)
        items = [(f"{t} ({machine_label(machines.get(t, ''))})" if remote else t, t)
                 for t in tasks]
        current = [(self.combo.itemText(i), self.combo.itemData(i))
                   for i in range(self.combo.count())]
        if items == current:
            return
        keep = self.task
        self.combo.blockSignals(True)
        self.combo.clear()
        for text, task in items:
            self.combo.addItem(text, task)
        self.combo.setCurrentIndex(tasks.index(keep) if keep in tasks else 0)
        self.combo.blockSignals(False)
        if self.task != keep:
            self._restart()

    def select_task(self, task: str) -> None:
        index = self.combo.findData(task)
        if index >= 0:
            self.combo.setCurrentIndex(index)

    def _task_changed(self, _index: int) -> None:
        self._restart()

    def _count(self, total: int, folded: int) -> None:
        """"12 lines", and how many of TensorFlow's messages are folded away: one count that
        grows, not a line each time some arrive."""
        lines = "" if not total else f"{total:,} line" if total == 1 else f"{total:,} lines"
        text = " · ".join(part for part in (
            lines, f"{folded:,} of TensorFlow's folded" if folded else "") if part)
        if folded and not total:
            self.text.setPlaceholderText("Only TensorFlow's start-up messages so far.")
        if text != self.count_label.text():
            self.count_label.setText(text)
            self.count_label.setToolTip(
                f"{folded:,} of TensorFlow's start-up messages are left out (the task's log "
                "file keeps them; \"all lines\" shows them)" if folded else "")

    def _restart(self) -> None:
        self._seen = 0
        self.text.clear()
        self.count_label.setText("")
        self.text.setPlaceholderText("No output yet.")
        self.refresh()

    def refresh(self) -> None:
        """Append the lines of the chosen task that arrived since the last call."""
        if self._metrics is None or not self.task:
            return
        raw = self.all_lines.isChecked()
        lines, total = self._metrics.log_lines_since(self.task, self._seen, raw)
        if total < self._seen:  # the buffer was replaced: start over
            self._seen = 0
            self.text.clear()
            lines, total = self._metrics.log_lines_since(self.task, 0, raw)
        skipped = total - self._seen - len(lines)
        self._seen = total
        self._count(total, 0 if raw else self._metrics.log_folded(self.task))
        if not lines:
            return
        if skipped > 0:
            lines = [f"… {skipped:,} earlier lines not kept …", *lines]
        bar = self.text.verticalScrollBar()
        follow = bar.value() >= bar.maximum() - 1
        keep = bar.value()
        sideways = self.text.horizontalScrollBar()
        left = sideways.value()
        self.text.appendPlainText("\n".join(lines))
        cursor = self.text.textCursor()
        if not cursor.hasSelection():
            # At the start of the last line, not its end: a view shown again (another page
            # was in front) scrolls to its cursor, which would hide the start of every line.
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.movePosition(QTextCursor.MoveOperation.StartOfBlock)
            self.text.setTextCursor(cursor)
        bar.setValue(bar.maximum() if follow else keep)
        sideways.setValue(left)
        if not self.text.toPlainText().strip():  # printed, but blank so far
            self.text.setPlaceholderText("Only blank lines so far.")
