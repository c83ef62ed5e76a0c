"""The live run dashboard: header, loss/throughput/device plots, task table and logs.

`Dashboard.attach(source)` shows a run (`dtgui.launch.runs.run_source.RunSource`). A 20 Hz QTimer
takes `source.metrics.snapshot()` and redraws only when `snapshot.version` changed (never once
per event); the run's own thread fills the metrics, so nothing here blocks: no file, no
process, no network. Plots are redrawn on every new version; the numbers (header, panel
readouts, task table) and the log at most 4 times a second, which is as fast as anyone reads
them. The run's life comes from `dtgui.ui.run_session.RunSession`: its `stateChanged` and
`ended` signals call `show_state` and `show_end`; after the end the plots keep their data and
the timer stops once every series is drawn.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QEvent, QObject, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QPalette, QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QInputDialog,
    QMessageBox,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.live_run import LiveRun, Snapshot
from dtgui.core.measure.bottleneck import plan_facts
from dtgui.core.measure.profile_answers import WRITTEN_MESSAGE, captured
from dtgui.core.measure.profile_input import ProfileInput
from dtgui.core.plans.plan_text import script_summary, script_text
from dtgui.core.run_tasks import task_key
from dtgui.core.runs.run_state import RunState
from dtgui.launch.runs.run_source import RunSource
from dtgui.launch.trackers.xprof_input import profile_inputs
from dtgui.ui.pages.run_widgets import LogView, RunHeader, TaskTable
from dtgui.ui.plots.memory_panel import MemoryPanel
from dtgui.ui.plots.panels import DevicePanel, ThroughputPanel
from dtgui.ui.plots.plot_base import DARK, LIGHT, PlotPanel, make_card, title_label
from dtgui.ui.plots.scalar_panel import AXIS_LABELS, ScalarPanel
from dtgui.ui.plots.step_split import StepSplitPanel
from dtgui.ui.plots.training_plots import (
    LearningRatePanel,
    ModelBar,
    TrainingLossPanel,
    ValidationPanel,
)
from dtgui.ui.workers import error_message, run_in_thread
from dtgui.worker.profile_request import MAX_PROFILE_STEPS
from dtgui.worker.stop_request import STOP_GRACE_SECONDS, TASK_STOP_SECONDS

if TYPE_CHECKING:
    from dtgui.ui.run_session import RunSession
    from dtgui.ui.run_sessions import RunSessions

REFRESH_MS = 50  # 20 Hz
# While series wait to be fed (the first frame of a long run, 100+ replicas), frames come this
# often instead: each still takes at most a frame's feed budget, so the window stays
# responsive, and the whole dashboard is drawn sooner.
BACKLOG_MS = 10
CONFIRM_STOP_SECONDS = 60.0  # Stop asks first once the run has gone on this long
DEFAULT_PROFILE_STEPS = 20  # what "Profile N steps…" offers: enough steps for XProf's averages
TEXT_SECONDS = 0.25  # numbers are for reading: at most 4 updates a second (plots: 20)
# The loss row's height it keeps whatever the banners above it say (the saved model, the
# bottleneck card, a profile's line): about 100 px of plot under its two rows of controls.
LOSS_ROW_MIN_HEIGHT = 186
# The banners' height they keep when they hold more than the plots leave them (then they
# scroll): two lines, so that all of it fits a 1366x768 screen with the header's profile
# line.
BANNERS_MIN_HEIGHT = 60


# what a capture does, costs (measured: 20 steps of a 2-worker MultiWorkerMirrored run trained
# about 0.2 s longer) and where it goes; the count's range, or OK greys out without a reason
PROFILE_QUESTION = (
    "Capture TensorFlow's profiler on every training task over the run's next N steps.\n"
    "Training goes on; it costs a little time (about 0.2 s for 20 steps of a 2-worker\n"
    "MultiWorkerMirrored run). Each task's trace goes into the run's folder, to\n"
    "output/tensorboard/TASK/plugins/profile; \"Open in TensorBoard\" then shows it.\n\n"
    f"Steps (1 to {MAX_PROFILE_STEPS}):")


def script_losses(metrics: LiveRun | None) -> dict[int, Any]:
    """For a script that reports no steps: each task's training-loss scalar as the curve of
    its task's number (worker:1 -> 1; one replica per worker on CPU), else nothing."""
    if metrics is None:
        return {}
    out: dict[int, Any] = {}
    for task, series in metrics.scalars.loss_series().items():
        kind, _, index = task.partition(":")
        if kind in ("worker", "chief") and index.isdigit() and int(index) not in out:
            out[int(index)] = series
    return out


def give_share(splitter: QSplitter, index: int, share: float) -> None:
    """The widget at `index` given `share` of the splitter's width; the others keep their
    proportions in the rest."""
    sizes = splitter.sizes()
    total = sum(sizes)
    wanted = int(total * share)
    others = sum(size for i, size in enumerate(sizes) if i != index) or 1
    splitter.setSizes([wanted if i == index else int(size * (total - wanted) / others)
                       for i, size in enumerate(sizes)])


class BannerArea(QScrollArea):
    """The bars between the run's header and its plots (the saved model, the bottleneck
    card): as tall as they are while there is room, and scrolled within what the plots leave
    when there is not (a 768-px screen with every bar shown), so the plots keep their
    height."""

    def __init__(self, banners: QWidget, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("bannerArea")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
        self.setWidget(banners)
        banners.installEventFilter(self)  # a bar shown, hidden or reworded: a new height

    def sizeHint(self) -> QSize:
        """The bars' height at the area's width (their texts wrap), all of it."""
        inner = self.widget()
        if inner is None or inner.layout() is None:
            return super().sizeHint()
        width = max(1, self.viewport().width())
        layout = inner.layout()
        assert layout is not None
        height = layout.totalHeightForWidth(width) if layout.hasHeightForWidth() \
            else inner.sizeHint().height()
        return QSize(super().sizeHint().width(), max(0, height))

    def minimumSizeHint(self) -> QSize:
        return QSize(0, min(BANNERS_MIN_HEIGHT, self.sizeHint().height()))

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()
        return super().eventFilter(watched, event)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if event.oldSize().width() != event.size().width():
            self.updateGeometry()  # the wrapped texts' height changes with the width


def _titled(title: str, body: QWidget, panel: str) -> QFrame:
    box = make_card(panel)
    layout = QVBoxLayout(box)
    layout.setContentsMargins(10, 6, 10, 10)
    layout.setSpacing(4)
    layout.addWidget(title_label(title))
    layout.addWidget(body, 1)
    return box


class Dashboard(QWidget):
    resumeRequested = Signal(object)  # Path: the folder of the shown ended run to resume
    mlflowRequested = Signal(object)  # Path: the shown run's folder, in MLflow's UI
    tensorboardRequested = Signal(list)  # [Path]: the shown run's folder (its profile too)
    _profileSaid = Signal(object, str)  # (the run, what its capture says): to the UI thread

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("dashboard")
        dark = self.palette().color(QPalette.ColorRole.Window).lightness() < 128
        theme = DARK if dark else LIGHT
        self.header = RunHeader()
        self.loss_panel = TrainingLossPanel(theme)  # smoothed, with the validation loss
        self.validation_panel = ValidationPanel(theme)  # shown once the run validates
        self.lr_panel = LearningRatePanel(theme)  # shown once the run reports its lr
        self.validation_panel.setVisible(False)
        self.lr_panel.setVisible(False)
        self.model_bar = ModelBar()  # where the trained model was saved
        self.step_split = StepSplitPanel()  # where each task's step time goes, the verdict
        self.throughput_panel = ThroughputPanel(theme)
        self.device_panel = DevicePanel(theme)
        self.scalar_panel = ScalarPanel(theme)  # a user's script's own scalars
        self.scalar_panel.setVisible(False)
        self.task_table = TaskTable(dark)
        self.memory_panel = MemoryPanel()  # peak memory per task and device; the network
        self.memory_panel.networkMeasured.connect(self.step_split.set_network)
        self.log_view = LogView()

        # Two rows of plots, each one plot high, so that the dashboard fits a 768-px screen:
        # the loss beside the validation (and a script's scalars), the rates below.
        lower = QSplitter(Qt.Orientation.Horizontal)
        lower.setObjectName("lowerPlotSplitter")
        lower.addWidget(self.throughput_panel)
        lower.addWidget(self.device_panel)
        lower.addWidget(self.lr_panel)
        self.plot_splitter = QSplitter(Qt.Orientation.Vertical)
        self.plot_splitter.setObjectName("plotSplitter")
        top = QSplitter(Qt.Orientation.Horizontal)
        top.setObjectName("topPlotSplitter")
        top.addWidget(self.loss_panel)
        top.addWidget(self.validation_panel)
        top.addWidget(self.scalar_panel)
        top.setStretchFactor(0, 3)
        top.setStretchFactor(1, 2)
        top.setStretchFactor(2, 2)
        top.setMinimumHeight(LOSS_ROW_MIN_HEIGHT)
        # A panel shown after its splitter was laid out gets only its minimum width: it is
        # given its share once (validation: 30 % of its row, learning rate: a third).
        self._late_panels = {self.validation_panel: (top, 0.3), self.lr_panel: (lower, 1 / 3)}
        self._sized: set[QWidget] = set()
        self.plot_splitter.addWidget(top)
        self.plot_splitter.addWidget(lower)
        self.plot_splitter.setStretchFactor(0, 3)
        self.plot_splitter.setStretchFactor(1, 2)
        bottom = QSplitter(Qt.Orientation.Horizontal)
        bottom.setObjectName("bottomSplitter")
        bottom.addWidget(_titled("Tasks", self.task_table, "tasks"))
        bottom.addWidget(_titled("Logs", self.log_view, "logs"))
        bottom.addWidget(_titled("Memory and network", self.memory_panel, "memory"))
        bottom.setStretchFactor(0, 2)
        bottom.setStretchFactor(1, 3)
        bottom.setStretchFactor(2, 3)  # the memory table's columns whole at 1366 px
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.setObjectName("dashboardSplitter")
        self.splitter.addWidget(self.plot_splitter)
        self.splitter.addWidget(bottom)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([620, 260])
        for split in (top, lower, self.plot_splitter, bottom, self.splitter):
            split.setChildrenCollapsible(False)
            split.setHandleWidth(6)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(4)
        layout.addWidget(self.header)
        banners = QWidget()
        banners.setObjectName("banners")
        banner_layout = QVBoxLayout(banners)
        banner_layout.setContentsMargins(0, 0, 0, 0)
        banner_layout.setSpacing(4)
        banner_layout.addWidget(self.model_bar)
        banner_layout.addWidget(self.step_split)
        self.banners = BannerArea(banners)
        layout.addWidget(self.banners)
        layout.addWidget(self.splitter, 1)

        self.timer = QTimer(self)
        self.timer.setObjectName("dashboardTimer")
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self.refresh)
        for panel in self._panels():
            panel.backlogged.connect(self._wake)
        self.header.stop_button.clicked.connect(self._stop_clicked)
        self.header.resume_button.clicked.connect(self._resume_clicked)
        self.header.profile_button.clicked.connect(self._profile_clicked)
        self.header.profile_label.linkActivated.connect(self._open_profile)
        self._profileSaid.connect(self._show_profile)
        self.header.mlflow_action.triggered.connect(
            lambda: self._emit_folder(lambda f: self.mlflowRequested.emit(f)))
        self.header.tensorboard_action.triggered.connect(
            lambda: self._emit_folder(lambda f: self.tensorboardRequested.emit([f])))
        self.task_table.taskActivated.connect(self.log_view.select_task)

        self.controller: RunSource | None = None
        self._folder: Path | None = None  # the shown run's
        self.redraw_count = 0  # full redraws done (one per new metrics version)
        self._version = -1
        self._ended = False
        self._stop_requested = False
        self._profiling: RunSource | None = None  # the run whose capture is under way
        self._log_seen: dict[str, int] = {}  # each task's log lines looked at for a new trace
        self._started = 0.0
        self._elapsed = 0.0
        self._failed_seen: set[str] = set()
        self._text_snap: Snapshot | None = None  # shown in the plots, not yet in the text
        self._text_time = 0.0
        self._script_run = False
        self._steps_per_epoch = 0
        self._loss_axis = "step"

    # -- public API --------------------------------------------------------------------------
    def attach(self, controller: RunSource, *, run_name: str | None = None,
               strategy: str | None = None, device_kind: str | None = None) -> None:
        """Show `controller`'s run. Name, strategy and device kind default to its plan's. A run
        that has ended already (from the history) is shown ended at once; a live one's
        changes come through `show_state` and `show_end`."""
        self.detach()
        plan = controller.plan
        self.controller = controller
        self._folder = Path(controller.bundle.path)  # shown after a detach too
        self.header.open_in_button.setEnabled(True)
        self._version = -1
        self._ended = False
        self._stop_requested = False
        self._profiling = None
        self.header.set_profile("")
        self._log_seen = {t: controller.metrics.log_lines_since(t, 0)[1]
                          for t in controller.metrics.log_tasks()}  # read just below
        self._started = time.monotonic()
        self._elapsed = 0.0
        self._failed_seen.clear()
        self._text_snap = None
        self._text_time = 0.0
        # A user's own script counts its own steps: the plan's number is only a hint to it.
        self._script_run = plan.script is not None
        self._steps_per_epoch = plan.steps_per_epoch
        self.loss_panel.clear()
        self._label_loss_axis("step")
        self.throughput_panel.clear()
        self.device_panel.clear()
        self.scalar_panel.clear()
        self.scalar_panel.setVisible(False)
        for panel in (self.validation_panel, self.lr_panel):
            panel.clear()
            panel.setVisible(False)
        self._sized.clear()
        self.model_bar.set_output(controller.output_dir)
        self.step_split.set_script(self._script_run)
        self.step_split.set_deterministic_ps(
            not self._script_run and plan.strategy.asynchronous and plan.deterministic)
        self.step_split.set_measuring(not controller.finished)
        self.step_split.clear()
        self.step_split.set_profile_inputs([])
        self._read_profile(controller)
        self.step_split.set_facts(plan_facts(plan))
        self.throughput_panel.setVisible(True)
        self.task_table.clear_tasks()
        self.header.set_run(run_name or controller.run_name or "run",
                            strategy or plan.strategy or "")
        if self._script_run:
            self.header.set_script(script_summary(plan), script_text(plan, indent=""))
        self.device_panel.set_device_kind(device_kind or plan.device_kind or "")
        self.log_view.set_metrics(controller.metrics)
        finished = controller.finished  # first: an ended run's state and message are final
        self.show_state(controller.state, controller.message)
        if finished:
            self.show_end(controller.state, controller.message)
        else:
            self.refresh()
        if not self._ended or self.backlog:
            self.timer.start()

    def listen(self, session: RunSession | RunSessions) -> None:
        """Take the shown run's state and end from `session` (it tells each change once;
        the window's sessions tell the shown run's)."""
        session.stateChanged.connect(self.show_state)
        session.ended.connect(self.show_end)

    def set_switcher(self, switcher: QWidget) -> None:
        """The switcher between the runs the window follows, above the run's header."""
        layout = self.layout()
        if isinstance(layout, QVBoxLayout):
            layout.insertWidget(0, switcher)

    def show_state(self, state: str, message: str) -> None:
        """The run's state changed (RunSession.stateChanged)."""
        self.header.set_state(state, message)
        self._update_stop_button(state, self._ended)

    def show_end(self, state: str, message: str) -> None:
        """The run ended (RunSession.ended): its complete metrics are drawn, the numbers
        written out, the elapsed time kept; the plots keep their data."""
        c = self.controller
        if c is None or self._ended:
            return
        self._ended = True
        self.step_split.set_measuring(False)
        self.header.set_state(state, message)
        self._update_stop_button(state, True)
        if self._text_snap is None:  # the text says the end even with no new event
            self._text_snap = c.metrics.snapshot()
        self.refresh()
        self._elapsed = max(self._elapsed, c.metrics.training_span())
        self.header.set_elapsed(self._elapsed)
        self._read_profile(c)  # the plan's profile steps may have been captured meanwhile

    def detach(self) -> None:
        """Stop following the run (what is shown stays)."""
        self.timer.stop()
        self.controller = None

    def refresh(self) -> None:
        """One timer tick: redraw if the metrics changed; the numbers at reading speed."""
        c = self.controller
        if c is None:
            return
        snap = c.metrics.snapshot()
        if snap.version != self._version:
            self._version = snap.version
            self._redraw(snap)
        else:  # series the last frame had no time for (runs with many replicas)
            for panel in self._panels():
                panel.feed_backlog()
        if self._text_snap is not None:
            self._update_text(c.metrics, force=self._ended)
        if not self._ended:
            self._elapsed = max(time.monotonic() - self._started, c.metrics.training_span())
            self.header.set_elapsed(self._elapsed)
        backlog = self.backlog
        if self._ended and not backlog:
            self.timer.stop()
            return
        interval = BACKLOG_MS if backlog else REFRESH_MS
        if self.timer.interval() != interval:
            self.timer.setInterval(interval)
        if not self.timer.isActive():
            self.timer.start()  # an ended run still has series to feed

    def _wake(self) -> None:
        """A panel has series to feed (the smoothing changed, say): frames until they are."""
        if self.controller is not None and not self.timer.isActive():
            self.timer.setInterval(BACKLOG_MS)
            self.timer.start()

    @property
    def backlog(self) -> bool:
        """Series not drawn yet: the frames' budget left them for the next ticks."""
        return any(curves.backlog for panel in self._panels() for curves in panel.curve_sets)

    @property
    def fully_drawn(self) -> bool:
        """Every series fed and every plot's image of them painted (see envelope_layer)."""
        return not self.backlog and all(curves.layer.drawn for panel in self._panels()
                                        for curves in panel.curve_sets)

    def _panels(self) -> tuple[PlotPanel, ...]:
        return (self.loss_panel, self.throughput_panel, self.device_panel, self.scalar_panel,
                self.validation_panel, self.lr_panel)

    # -- internals ---------------------------------------------------------------------------
    def _label_loss_axis(self, text: str) -> None:
        """The loss plot's x: steps, or what a script's loss scalar counts (its epochs)."""
        if text != self._loss_axis:
            self._loss_axis = text
            self.loss_panel.set_axis_label("bottom", text)

    def _redraw(self, snap: Snapshot) -> None:
        self.redraw_count += 1
        scalars = self._scalars()
        self.loss_panel.update_data(snap.replica_loss or script_losses(self._metrics()))
        self.throughput_panel.update_data(snap.throughput)
        self.device_panel.update_data(snap.device_util, snap.device_mem)
        panels: list[PlotPanel] = [self.loss_panel, self.throughput_panel, self.device_panel]
        panels += self._redraw_training(snap)
        if scalars:  # a user's own script: its scalars; throughput only when reported
            self.throughput_panel.setVisible(bool(snap.throughput))
            self.scalar_panel.setVisible(True)
            metrics = self._metrics()
            axes = metrics.scalars.axes() if metrics is not None else {}
            self.scalar_panel.update_data(scalars, axes)
            if not snap.replica_loss and metrics is not None:  # the loss plot is a scalar's
                tags = sorted(set(metrics.scalars.loss_tags().values()))
                self._label_loss_axis(next((AXIS_LABELS[axes[t]] for t in tags if t in axes),
                                           "step"))
            panels.append(self.scalar_panel)
        for panel in panels:
            panel.settle()
        self._text_snap = snap

    def _redraw_training(self, snap: Snapshot) -> list[PlotPanel]:
        """Validation, learning rate and saved models (schema 2 runs that report them);
        returns the panels fed."""
        validation = snap.validation
        lr = snap.learning_rate
        self.loss_panel.update_validation(validation.get("loss"))
        fed: list[PlotPanel] = []
        if any(k != "loss" and len(v[0]) for k, v in validation.items()):
            self.validation_panel.setVisible(True)
            self.validation_panel.update_data(validation)
            fed.append(self.validation_panel)
        if len(lr[0]):
            self.lr_panel.setVisible(True)
            self.lr_panel.update_data(lr)
            fed.append(self.lr_panel)
        self.model_bar.update_models(list(snap.models))
        for panel in fed:
            if panel in self._late_panels and panel not in self._sized:
                self._sized.add(panel)
                splitter, share = self._late_panels[panel]
                give_share(splitter, splitter.indexOf(panel), share)
        return fed

    def _metrics(self) -> LiveRun | None:
        return self.controller.metrics if self.controller is not None else None

    def _scalars(self) -> dict[str, Any]:
        metrics = self._metrics()
        return metrics.scalars.snapshot() if metrics is not None else {}

    def _starting_note(self, snap: Snapshot) -> str:
        """What a run with no step yet does ("": it has steps, or has ended), from its
        state and its tasks' states: its tasks are started, they load TensorFlow until they
        report started (a while on a loaded machine), then build the model and trace its
        first step. A user's script may never count steps: it says nothing."""
        if self._ended or snap.step or self._script_run:
            return ""
        if self.header.state != RunState.RUNNING or not snap.tasks:
            return "launching its tasks…"
        if all(s.status == RunState.STARTING for s in snap.tasks.values()):
            return "loading TensorFlow…"
        return "building the model and its first step…"

    def _waiting_text(self, snap: Snapshot) -> str:
        """What the step plots say before their first point: what the run does meanwhile,
        or that it ended without one."""
        if self._script_run:
            return ("The script reported nothing to plot here." if self._ended
                    else "Waiting for the script's first numbers…")
        if self._ended:
            return (f"No step was trained: the run {self.header.state or 'ended'} before "
                    "its first.")
        note = self._starting_note(snap)
        return "Waiting for the first step…" + (f"\nThe run is {note}" if note else "")

    def _update_text(self, metrics: LiveRun, force: bool) -> None:
        """Header, readouts, task table and log: from the latest snapshot, at most every
        TEXT_SECONDS (and at the end)."""
        now = time.monotonic()
        snap = self._text_snap
        if snap is None or (not force and now - self._text_time < TEXT_SECONDS):
            return
        self._text_snap = None
        self._text_time = now
        self.device_panel.ended = self.step_split.ended = self._ended
        for panel in (self.loss_panel, self.throughput_panel, self.device_panel,
                      self.scalar_panel, self.validation_panel, self.lr_panel):
            panel.show_readout()
        if self._script_run and snap.script_progress.unit:  # what the script told
            self.header.set_script_progress(snap.script_progress)
        else:  # a script counts its own steps: the plan's number is only a hint to it
            note = self._starting_note(snap)
            self.header.set_progress(snap.step, 0 if self._script_run else snap.total_steps,
                                     f"starting: {note}" if note else "")
        self.header.set_epoch(snap.epoch, snap.last_epoch_metrics, snap.step,
                              0 if self._script_run else self._steps_per_epoch)
        waiting = self._waiting_text(snap)
        for panel in (self.loss_panel, self.throughput_panel):
            panel.set_waiting_text(waiting)
        self.device_panel.set_waiting_text(
            "Waiting for the first sample of the run's devices…" if not self._ended
            else "No sample of the run's devices.")
        self.task_table.update_tasks(snap.tasks)
        self.memory_panel.update_memory(snap.memory, snap.device_use)
        self.memory_panel.update_tasks(snap.tasks, snap.gradient_bytes, snap.all_reduce_note)
        self.memory_panel.update_traffic(snap.device_use, snap.tasks)
        self.step_split.set_unhelped(self.memory_panel.unhelped(snap.device_use, snap.tasks))
        self.step_split.update_splits(snap.splits, snap.memory.devices(), snap.loads,
                                      snap.split_deferred)
        self._notice_profiles(metrics)
        tasks = sorted(set(snap.tasks) | set(metrics.log_tasks()), key=task_key)
        self.log_view.set_tasks(tasks, {t: s.machine for t, s in snap.tasks.items()})
        for task, state in snap.tasks.items():
            if state.status == "failed" and task not in self._failed_seen:
                self._failed_seen.add(task)
                if len(self._failed_seen) == 1:
                    self.log_view.select_task(task)  # show the first failure's log
        self.log_view.refresh()

    def _stop_clicked(self) -> None:
        c = self.controller
        if c is None or c.finished or self._stop_requested:
            return
        if self._elapsed > CONFIRM_STOP_SECONDS and \
                not confirm_stop(self, c.metrics.snapshot(), self._script_run):
            return
        self._stop_requested = True
        c.request_stop()
        self._update_stop_button(c.state, False)

    def _profile_clicked(self) -> None:
        c = self.controller
        if c is None or c.finished or self._profiling is not None:
            return
        steps, ok = QInputDialog.getInt(self, "Profile steps", PROFILE_QUESTION,
                                        DEFAULT_PROFILE_STEPS, 1, MAX_PROFILE_STEPS)
        if not ok or c is not self.controller:
            return
        self._profiling = c
        self._update_stop_button(c.state, self._ended)
        self.header.set_profile("asking every task for a profile…")

        def said(text: str) -> None:  # on the run's thread: the signal takes it to the UI's
            self._profileSaid.emit(c, text)

        run_in_thread(lambda: c.request_profile(steps, said=said),
                      lambda text: self._profile_done(c, text),
                      lambda exc: self._profile_done(c, f"no profile: {error_message(exc)}"),
                      context=self)

    def _show_profile(self, source: RunSource, text: str) -> None:
        if source is self.controller:
            self.header.set_profile(text)

    def _profile_done(self, source: RunSource, text: str) -> None:
        if self._profiling is source:
            self._profiling = None
        if source is not self.controller:
            return
        if text == WRITTEN_MESSAGE:
            text = f'{WRITTEN_MESSAGE}: <a href="tensorboard">Open in TensorBoard</a>'
            self._read_profile(source)
        self.header.set_profile(text)
        self._update_stop_button(source.state, self._ended)

    def _notice_profiles(self, metrics: LiveRun) -> None:
        """A trace written since the last look that this window did not ask for (`dtgui
        profile`, the plan's profile steps): said, and read onto the bottleneck card."""
        new = False
        for task in metrics.log_tasks():
            lines, self._log_seen[task] = metrics.log_lines_since(task,
                                                                  self._log_seen.get(task, 0))
            new = new or captured(lines)
        c = self.controller
        if new and c is not None and self._profiling is None:
            self.header.set_profile(
                f'{WRITTEN_MESSAGE}: <a href="tensorboard">Open in TensorBoard</a>')
            self._read_profile(c)

    def _read_profile(self, source: RunSource) -> None:
        """What the run's newest profile says of the input, read off the UI thread (XProf
        converts the traces in a process of its own), onto the bottleneck card."""
        output = source.output_dir

        def show(found: list[ProfileInput]) -> None:
            if source is self.controller:
                self.step_split.set_profile_inputs(found)

        run_in_thread(lambda: profile_inputs(output), show, lambda _exc: None, context=self)

    def _open_profile(self, _link: str) -> None:
        c = self.controller
        if c is not None:
            self.tensorboardRequested.emit([c.output_dir.parent])
    def _emit_folder(self, emit: Callable[[Path], None]) -> None:
        if self._folder is not None:
            emit(self._folder)

    def _resume_clicked(self) -> None:
        c = self.controller
        if c is not None and c.finished and c.record is not None:
            self.resumeRequested.emit(Path(c.record.bundle))

    def _update_stop_button(self, state: str, finished: bool) -> None:
        c = self.controller
        # a stopped or failed run that kept checkpoints goes on where it stopped
        resumable = finished and state in (RunState.STOPPED, RunState.FAILED, RunState.LOST) and \
            c is not None and c.record is not None and \
            (c.plan.checkpoint_every > 0 or c.plan.script is not None)
        self.header.resume_button.setVisible(resumable)
        self.header.resume_button.setEnabled(resumable)
        profile = self.header.profile_button
        profile.setVisible(not finished)
        profile.setEnabled(not finished and state == RunState.RUNNING and
                           not self._stop_requested and self._profiling is None)
        button = self.header.stop_button
        if finished:
            button.setText("Stop")
            button.setEnabled(False)
        elif self._stop_requested or state == RunState.STOPPING:
            button.setText("Stopping…")
            button.setEnabled(False)
        else:
            button.setText("Stop")
            button.setEnabled(state == RunState.RUNNING)


def stop_question(snap: Snapshot, script: bool = False) -> tuple[str, str]:
    """The Stop dialog's question and what it says is kept. The step a run saves at cannot be
    known when asked: training goes on while the question is open, and each task stops at the
    end of the device call it is in (many steps at once), so it says the step it is at now
    and that the checkpoint is of the step it reaches."""
    now = f" (now at step {snap.step:,})" if snap.step and not script else ""
    question = f"Stop the run{now}?"
    if script:
        return question, (f"Your script is sent SIGTERM and has {STOP_GRACE_SECONDS:g} s to "
                          "save a checkpoint of its own (docs/own-scripts.md).")
    return question, ("Every task finishes the steps it is running and saves a checkpoint at "
                      f"the step it reaches (within {TASK_STOP_SECONDS} s): training can "
                      "continue from there with Resume.")


def confirm_stop(parent: QWidget, snap: Snapshot, script: bool = False) -> bool:
    """Ask before stopping a run that has trained a while; says what is kept."""
    question, kept = stop_question(snap, script)
    box = QMessageBox(QMessageBox.Icon.Question, "Stop the run?", question, parent=parent)
    box.setInformativeText(kept)
    stop = box.addButton("Stop", QMessageBox.ButtonRole.DestructiveRole)
    keep = box.addButton("Keep training", QMessageBox.ButtonRole.RejectRole)
    box.setDefaultButton(keep)
    box.setEscapeButton(keep)
    box.exec()
    return box.clickedButton() is stop
