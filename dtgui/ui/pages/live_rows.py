"""The Runs page's rows of running runs, kept live without Refresh: state, steps, loss, best
validation value so far and time left.

Once a second while the page is shown, each running row is brought up to date: a run this
window follows from its session's run in memory (nothing read), any other (kept training by
a watcher, started by the queue or by `dtgui run`) from its small files, read off the UI
thread: its record and only the lines its events files gained since the last look
(`dtgui.core.runs.live_progress`). A run followed here that the list does not hold yet (just
launched) makes the page read its rows again. A run followed here that ends is told at once
(`run_ended`, from its session's end): its row does not wait for the next look, which no
longer counts it among the runs followed and would read its files instead. The cost grows
with the running rows, not with what the runs trained.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer, Signal

from dtgui.core.runs.run_index import SWEEP, RunRow
from dtgui.launch.runs.run_source import RunSource
from dtgui.ui.pages.runs_model import RunsModel
from dtgui.ui.workers import run_in_thread

if TYPE_CHECKING:  # numpy: loaded with the first running row, not with the window
    from dtgui.core.runs.live_progress import EventsProgress, LiveFacts
    from dtgui.core.scripts.script_progress import ScriptProgress

LIVE_MS = 1000  # rows are read this often while the page is shown


class LiveRows(QObject):
    """Keeps `model`'s running rows live; `followed()` names the runs this window follows
    (their local folders); `missing` asks for the rows again."""

    missing = Signal()  # a run followed here has no row yet: read the rows again

    def __init__(self, model: RunsModel, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.followed: Callable[[], Mapping[str, RunSource]] = dict
        self.readers: dict[str, EventsProgress] = {}  # folder -> its events' reader
        self._reading = False
        self._asked: frozenset[str] = frozenset()  # the followed folders last found missing
        # the list's folders and its running rows, taken again when the list is read again
        # (10,000 rows are not walked every second)
        self._folders: set[str] = set()
        self._running: list[RunRow] = []
        model.modelReset.connect(self._take_rows)
        self._take_rows()
        self.timer = QTimer(self)
        self.timer.setInterval(LIVE_MS)
        self.timer.timeout.connect(self.update)

    def start(self) -> None:
        self.update()
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()

    def _take_rows(self) -> None:
        self._folders = {r.folder for r in self.model.rows}
        self._running = [r for r in self.model.rows if r.active and r.kind != SWEEP]

    def update(self) -> None:
        """One look at every running row."""
        followed = self.followed()
        self.model.followed = set(followed)
        missing = frozenset(f for f in followed if f not in self._folders)
        if missing and missing != self._asked:
            self.missing.emit()
        self._asked = missing
        self._running = [r for r in self._running if r.active]
        others: list[RunRow] = []
        for row in self._running:
            source = followed.get(row.folder)
            if source is not None:
                self._from_source(row, source)
            else:
                others.append(row)
        for folder in set(self.readers) - {r.folder for r in others}:
            del self.readers[folder]  # ended or gone: its reader goes with it
        if others and not self._reading:
            from dtgui.core.runs.live_progress import EventsProgress, read_live

            self._reading = True
            readers = {r.folder: self.readers.setdefault(r.folder, EventsProgress(r.folder))
                       for r in others}
            run_in_thread(lambda: {f: read_live(f, reader) for f, reader in readers.items()},
                          self._read, self._not_read, context=self)

    def run_ended(self, source: RunSource) -> None:
        """The run `source`, followed here, ended (its session said so): its row says it
        now."""
        folder = str(source.bundle.path)
        for row in self._running:
            if row.folder == folder and row.active:
                self._from_source(row, source)

    def _from_source(self, row: RunRow, source: RunSource) -> None:
        finished = source.finished  # first: an ended run's state and message are final
        metrics = source.metrics
        record = source.record
        self._set(row, str(source.state), not finished, source.message, metrics.progress(),
                  source.final_loss, metrics.best_validation(),
                  record.ended if finished and record is not None else None)

    def _read(self, facts: dict[str, LiveFacts]) -> None:
        self._reading = False
        rows = {r.folder: r for r in self._running}  # (the list may have been read again)
        for folder, fact in facts.items():
            row = rows.get(folder)
            if row is None or not row.active:
                continue
            record = fact.record
            if record is None:
                self._set(row, row.state, True, row.message, fact.progress, fact.loss,
                          fact.best_val, None)
            else:
                self._set(row, str(record.state), record.is_active, record.message,
                          fact.progress, fact.loss if record.final_loss is None
                          else record.final_loss, fact.best_val, record.ended)

    def _not_read(self, _exc: BaseException) -> None:
        self._reading = False  # tried again at the next look

    def _set(self, row: RunRow, state: str, active: bool, message: str,
             progress: ScriptProgress, loss: float | None,
             best_val: tuple[str, float] | None, ended: float | None) -> None:
        """`best_val`: (name, value) of its best validation value so far (None: none yet)."""
        if progress.unit == "step" and not progress.total and row.total_steps:
            progress = replace(progress, total=row.total_steps)  # its start not read: planned
        before = (row.state, row.active, row.message, row.steps, row.total_steps,
                  row.final_loss, row.best_val, row.best_val_name, row.ended,
                  self.model.progress.get(row.folder))
        row.state, row.active, row.message, row.ended = state, active, message, ended
        if progress.unit == "step" and progress.done:
            row.steps, row.total_steps = progress.done, progress.total or row.total_steps
        if loss is not None:
            row.final_loss = loss
        if best_val is not None:
            row.best_val_name, row.best_val = best_val
        if active:
            self.model.progress[row.folder] = progress
        else:
            self.model.progress.pop(row.folder, None)
        after = (row.state, row.active, row.message, row.steps, row.total_steps,
                 row.final_loss, row.best_val, row.best_val_name, row.ended,
                 self.model.progress.get(row.folder))
        if after != before:
            self.model.row_changed(row)
