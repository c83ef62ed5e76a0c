"""Where each task's step time goes: a stacked bar per task (input wait, compute,
communication, dtgui's reporting) and the run's verdict with what to change.

Fed with `Snapshot.splits` (dtgui.core.measure.bottleneck.StepSplit, each task's latest) at the
dashboard's reading speed; hidden until a task has measured its split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPalette
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QWidget,
)

from dtgui.core.measure.bottleneck import (
    COMMUNICATION,
    COMPUTE,
    MEMORY,
    PART_NAMES,
    PARTS,
    CpuLoad,
    RunFacts,
    StepSplit,
    Verdict,
    verdict,
)
from dtgui.core.measure.memory import DeviceMemory
from dtgui.core.measure.profile_input import ProfileInput
from dtgui.core.measure.split_wait import SplitWait, wait_text
from dtgui.core.run_tasks import task_key
from dtgui.ui.plots.plot_base import card_rows, title_label

COLOURS = {"input": QColor("#e8a33d"), "compute": QColor("#3f9e6b"),
           "communication": QColor("#4a86d6"), "reporting": QColor("#9aa0a6")}
LIMIT_COLOURS = {"input": "#b86e00", "communication": "#2a64b0", "compute": "#2e7d52",
                 "reporting": "#5f6368", "memory": "#b3261e", "cpu": "#8e24aa"}
NO_FACTS = RunFacts()  # a run's facts not known
# A bar whose compute was not told apart from its communication (a ParameterServer worker
# whose round trip, timed alone, took the whole step past its input wait)
COMPUTE_IN_COMMUNICATION = ("compute: not measured apart: the round trip to the parameter "
                            "servers, timed alone, took as long as this step past its input "
                            "wait, so the communication shown holds compute too")
MAX_ROWS = 8  # tasks shown one bar each; the rest are summed up in a line
SCRIPT_HINT = ("A script's split needs its help: call <code>dtgui_worker.report(step, loss)</code> "
               "each step, and read its batches through <code>dtgui_worker.timed(dataset)</code> "
               "for the input wait. Without it, its devices' use is in the device plot.")
DETERMINISTIC_PS_HINT = (
    "The workers' steps are not split: deterministic ops forbid the clock they would read "
    "(tf.timestamp). ParameterServer training is asynchronous, so not repeatable anyway: "
    "turn Deterministic ops off (wizard, Options) to see where the time goes.")

MEASURING_HINT = ("Measuring: each task times its first steps (input wait, compute, "
                  "communication); its split shows here once it has.")

COST_TIP = ("What measuring the split took: its calibration runs (each task times a few steps "
            "fed from one cached batch, the all-reduce alone and its input pipeline alone), "
            "making them included. "
            "\"Training\" is the time on the clock since the task's training began, its first "
            "step's tracing included; the header's elapsed time is longer: it counts from the "
            "launch, the tasks' start-up (loading TensorFlow, building the model) included. "
            "Measuring is kept under 5 % of the first minute and 1 % of a long run.")


def verdict_html(found: Verdict) -> str:
    """The verdict line, its figure in the limit's colour (a memory limit, then the step
    time's verdict after it); other processes' CPU use slowing that part on a line below."""
    colour = LIMIT_COLOURS.get(found.limit, "#5f6368")
    html = (f'<span style="color:{colour}; font-weight:600">{escape(found.figure)}</span>'
            f" — {escape(found.advice)}")
    if found.crowded is not None:
        html += "<br>" + verdict_html(found.crowded)
    if found.time is not None and found.time.known:
        html += f"<br>Step time: {verdict_html(found.time)}"
    return html


def _milliseconds(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:.3g} ms" if ms < 100 else f"{ms:,.0f} ms"


def part_line(split: StepSplit, part: str, facts: RunFacts = NO_FACTS) -> str:
    """A part's line in a bar's tooltip: its time and share; a communication of nothing says
    why, from how it is measured (the calibration times the all-reduce alone, as the time of
    2n all-reduces less that of n: one quicker than the timing's noise comes out as 0; a
    single replica's is not timed, having nothing to reduce)."""
    name = PART_NAMES[part]
    line = f"{name}: {_milliseconds(split.seconds(part))} ({split.share(part) * 100:.1f} %)"
    if part != COMMUNICATION or split.seconds(part) > 0 or split.method != "calibrated":
        return line
    if facts.replicas == 1:
        return f"{name}: none (a single replica has nothing to all-reduce)"
    replicas = f"the {facts.replicas} replicas" if facts.replicas else "the replicas"
    local = " (on one machine: no network between them)" if facts.hosts == 1 else ""
    return (f"{name}: 0 ms, too quick to measure: the all-reduce between {replicas}, timed "
            f"alone, took less than the timing's noise{local}")


class SplitBar(QWidget):
    """One task's step as a bar of its parts, widths in proportion to their time; the bar
    spans `scale` of the width (the slowest task's step spans all of it)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.split: StepSplit | None = None
        self.scale = 1.0
        self.setMinimumHeight(14)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:
        return QSize(240, 16)

    def set_split(self, split: StepSplit, scale: float = 1.0,
                  facts: RunFacts = NO_FACTS) -> None:
        """`facts`: the run's (its replicas and machines), for what a communication of
        nothing means."""
        self.split = split
        self.scale = min(1.0, max(0.0, scale))
        lines = [part_line(split, p, facts) for p in PARTS if p in split.measured]
        if COMPUTE not in split.measured and COMMUNICATION in split.measured:
            lines.append(COMPUTE_IN_COMMUNICATION)
        self.setToolTip("\n".join(lines))
        self.update()

    def paintEvent(self, event: object) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        rect = QRectF(self.rect()).adjusted(0, 1, -1, -1)
        painter.fillRect(rect, self.palette().color(QPalette.ColorRole.AlternateBase))
        split = self.split
        if split is not None:
            x = rect.left()
            for part in PARTS:
                width = rect.width() * self.scale * split.share(part)
                if width > 0:
                    painter.fillRect(QRectF(x, rect.top(), width, rect.height()), COLOURS[part])
                    x += width
        painter.setPen(self.palette().color(QPalette.ColorRole.Mid))
        painter.drawRect(rect)
        painter.end()


def _swatch(part: str) -> QWidget:
    box = QWidget()
    layout = QHBoxLayout(box)
    layout.setContentsMargins(0, 0, 10, 0)
    layout.setSpacing(4)
    chip = QFrame()
    chip.setFixedSize(10, 10)
    chip.setStyleSheet(f"background: {COLOURS[part].name()}; border: none;")
    layout.addWidget(chip)
    layout.addWidget(QLabel(PART_NAMES[part]))
    return box


class StepSplitPanel(QFrame):
    """The verdict line above one bar per task (the first MAX_ROWS in task order)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = card_rows(self, "split", (10, 6, 10, 8), 4)
        head = QHBoxLayout()
        head.setSpacing(8)
        head.addWidget(title_label("Where the time goes"))
        for part in PARTS:
            head.addWidget(_swatch(part))
        head.addStretch(1)
        self.cost_label = QLabel("")
        self.cost_label.setObjectName("splitCost")
        self.cost_label.setToolTip(COST_TIP)
        head.addWidget(self.cost_label)
        layout.addLayout(head)
        self.verdict_label = QLabel("")
        self.verdict_label.setObjectName("splitVerdict")
        self.verdict_label.setWordWrap(True)
        self.verdict_label.setTextFormat(Qt.TextFormat.RichText)
        self.verdict_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.verdict_label)
        self.network_label = QLabel("")  # the doctor's links, beside the communication share
        self.network_label.setObjectName("splitNetwork")
        self.network_label.setWordWrap(True)
        self.network_label.setStyleSheet("color: #5f6368;")
        self.network_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.network_label.setVisible(False)
        layout.addWidget(self.network_label)
        # what TensorFlow's profiler says of the same steps, once a profile exists
        self.profile_label = QLabel("")
        self.profile_label.setObjectName("splitProfile")
        self.profile_label.setWordWrap(True)
        self.profile_label.setStyleSheet("color: #5f6368;")
        self.profile_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.profile_label.setToolTip(
            "Read from the run's newest profile (TensorFlow's profiler, converted by XProf): "
            "the share of the profiled steps' time in which a replica waited for its next "
            "batch (the iterator's GetNext)")
        self.profile_label.setVisible(False)
        layout.addWidget(self.profile_label)
        self.grid = QGridLayout()
        self.grid.setHorizontalSpacing(8)
        self.grid.setVerticalSpacing(2)
        self.grid.setColumnStretch(1, 1)
        layout.addLayout(self.grid)
        self.more_label = QLabel("")
        layout.addWidget(self.more_label)
        self.facts = RunFacts()
        self._near: tuple[DeviceMemory, ...] = ()  # devices near their memory limit, shown
        self._unhelped = ""  # what the samples say without a split
        self._deferred: dict[str, SplitWait] = {}  # tasks not measured yet, and why
        self.script = False  # a user's own script: a hint until it reports a split
        self.deterministic_ps = False  # ParameterServer with deterministic ops: no split
        self.ended = False  # the run ended (a split not measured will not be)
        self.measuring = False  # a live run whose tasks have not reported a split yet
        self.verdict = Verdict("")
        self._rows: list[tuple[QLabel, SplitBar, QLabel]] = []
        self._shown: dict[str, StepSplit] = {}
        self._loads: tuple[CpuLoad, ...] = ()
        self.setVisible(False)

    def set_facts(self, facts: RunFacts) -> None:
        """What the advice depends on (the run's plan and machines)."""
        self.facts = facts

    def set_script(self, script: bool) -> None:
        self.script = script

    def set_deterministic_ps(self, deterministic_ps: bool) -> None:
        self.deterministic_ps = deterministic_ps

    def set_measuring(self, measuring: bool) -> None:
        """A live run (the card says a split is coming) or an ended one (it says nothing
        without a split)."""
        if measuring == self.measuring:
            return
        self.measuring = measuring
        self._say_words()

    @property
    def hint(self) -> str:
        """What the card says before (or instead of) a split: how to get one, and what the
        device and network samples say meanwhile."""
        reason = SCRIPT_HINT if self.script else \
            DETERMINISTIC_PS_HINT if self.deterministic_ps else \
            MEASURING_HINT if self.measuring else ""
        if reason and self._unhelped:
            reason += "<br>" + escape(self._unhelped)
        return reason

    def set_unhelped(self, text: str) -> None:
        """What the samples say without the training code's help (dtgui.core.measure.device_use),
        shown under the hint while there is no split."""
        if text == self._unhelped:
            return
        self._unhelped = text
        self._say_words()

    def set_profile_inputs(self, found: Sequence[ProfileInput]) -> None:
        """What each task's newest profile says of the input ([]: no profile read)."""
        text = " · ".join(f.text for f in sorted(found, key=lambda f: task_key(f.task)))
        self.profile_label.setText(text)
        self.profile_label.setVisible(bool(text))
        self.setVisible(bool(self._shown or self._near) or self._has_words())

    @property
    def words(self) -> str:
        """What the card says without a split: why there is none yet (or was none) when a
        task said so (`wait_text`), else the hint."""
        if not self._deferred:
            return self.hint
        line = escape(wait_text(self._deferred.values(), self.ended))
        if self._unhelped:  # not the hint: it says a split is being measured
            line += "<br>" + escape(self._unhelped)
        return line

    def _has_words(self) -> bool:
        """Something to say without a split: a hint, why none, or a profile's figure."""
        return bool(self.words) or bool(self.profile_label.text())

    def _say_words(self) -> None:
        """Without a split (nor a device near its memory limit): the words instead, the card
        shown while it has any."""
        if self._shown or self._near:
            return
        words = self.words
        if words != self.verdict_label.text():
            self.verdict_label.setText(words)
        self.setVisible(self._has_words())

    def set_network(self, text: str) -> None:
        """What the doctor measured between the run's machines ("" when it has not)."""
        self.network_label.setText(text)
        self.network_label.setVisible(bool(text))

    def clear(self) -> None:
        self._shown = {}
        self._near = ()
        self._deferred = {}
        self._loads = ()
        self.verdict = Verdict("")
        for row in self._rows:
            for widget in row:
                widget.setVisible(False)
        self.more_label.setVisible(False)
        self.cost_label.setText("")
        self._say_words()

    def update_splits(self, splits: Mapping[str, StepSplit],
                      memory: Sequence[DeviceMemory] = (), loads: Sequence[CpuLoad] = (),
                      deferred: Mapping[str, SplitWait] | None = None) -> None:
        """Each task's split (over its last few), its devices' memory (a device near its
        limit is the run's first limit), its machine's CPU load, and for a task not measured
        yet why not (`deferred`: `SplitWait`)."""
        near = tuple(d for d in memory if d.near_limit)
        if not splits and not near:
            if self._shown or self._near:
                self.clear()
            self._deferred = dict(deferred or {})
            self._say_words()
            return
        self._deferred = dict(deferred or {})
        if splits == self._shown and near == self._near and tuple(loads) == self._loads:
            return
        self._shown, self._near, self._loads = dict(splits), near, tuple(loads)
        shown = self.verdict.time if self.verdict.limit == MEMORY else self.verdict
        previous = shown.limit if shown is not None else ""
        crowded = shown is not None and shown.crowded is not None
        self.verdict = verdict(splits.values(), self.facts, near, loads, previous, crowded)
        line = verdict_html(self.verdict)
        if not splits and self.hint:
            line += "<br>" + self.hint
        self.verdict_label.setText(line)
        tasks = sorted(splits, key=task_key)
        slowest = max((s.seconds_per_step for s in splits.values()), default=0.0)
        for i, task in enumerate(tasks[:MAX_ROWS]):
            if i == len(self._rows):
                row = (QLabel(), SplitBar(), QLabel())
                row[2].setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                for col, widget in enumerate(row):
                    self.grid.addWidget(widget, i, col)
                self._rows.append(row)
            name, bar, figure = self._rows[i]
            split = splits[task]
            name.setText(task)
            bar.set_split(split, split.seconds_per_step / slowest if slowest > 0 else 1.0,
                          self.facts)
            figure.setText(f"{_milliseconds(split.seconds_per_step)} / step")
            for widget in self._rows[i]:
                widget.setVisible(True)
        for row in self._rows[len(tasks):]:
            for widget in row:
                widget.setVisible(False)
        hidden = len(tasks) - MAX_ROWS
        self.more_label.setText(f"+ {hidden} more task(s): the verdict covers them"
                                if hidden > 0 else "")
        self.more_label.setVisible(hidden > 0)
        costliest = max(splits.values(), key=lambda s: (s.cost_share, s.task), default=None)
        self.cost_label.setText(costliest.cost_text if costliest is not None else "")
        self.setVisible(True)
