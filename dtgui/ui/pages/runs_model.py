"""The Runs page's table: every run and sweep as a row (`RunRow`), sorted in the model and
filtered by a proxy.

Sorting is the model's (a Python sort over plain values: 10,000 rows in milliseconds, where a
proxy would call back into Python for each comparison); the proxy (`RunsFilter`) only hides
rows: archived ones unless shown, a sweep's trials unless the sweep is expanded (or the
filter names them), and those without every word of the filter text.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QPersistentModelIndex,
    QSortFilterProxyModel,
    Qt,
)
from PySide6.QtGui import QColor, QFont

from dtgui.core.plans.strategies import STRATEGIES
from dtgui.core.runs.run_index import SWEEP, TRIAL, RunRow, significant, split_tags
from dtgui.core.runs.run_state import RunState
from dtgui.ui.pages.state_colours import STATE_COLOURS

if TYPE_CHECKING:  # (numpy: not loaded with the window)
    from dtgui.core.scripts.script_progress import ScriptProgress

Index = QModelIndex | QPersistentModelIndex
(NAME, STATE, STRATEGY, WHERE, STARTED, DURATION, STEPS, FINAL_LOSS, BEST_VAL, TAGS,
 NOTE) = range(11)
COLUMNS = ("Name", "State", "Strategy", "Where", "Started", "Duration", "Steps", "Final loss",
           "Best val.", "Tags", "Note")
NUMERIC = (DURATION, STEPS, FINAL_LOSS, BEST_VAL)
ROW_ROLE = Qt.ItemDataRole.UserRole + 1  # the RunRow itself
RUNNING_COLOUR = QColor(STATE_COLOURS[RunState.RUNNING])  # a run still training


def _bold() -> QFont:
    font = QFont()
    font.setBold(True)
    return font

UNWATCHED_TIP = ("Nobody watches this run: if a task fails, nothing stops the others. "
                 "Reattach to watch it.")
FOLLOWED_TIP = ("This window follows the run and applies its failure policy: its "
                "dashboard shows it (the switcher above the run).")
WATCHED_TIP = ("dtgui's watcher applies the run's failure policy while dtgui is closed; "
               "Reattach takes the run back from it.")


def when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp)) if stamp else ""


def duration_text(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return ""
    hours, rest = divmod(round(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def strategy_title(key: str) -> str:
    info = STRATEGIES.get(key)
    return info.title if info else key


def note_line(note: str) -> str:
    """A note's first line in its cell (all of it in the tooltip)."""
    lines = note.strip().splitlines()
    return lines[0] + (" …" if len(lines) > 1 else "") if lines else ""


def _sort_key(column: int) -> Callable[[RunRow], Any]:
    """Plain values to sort by; rows without a value go last either way round."""
    keys: dict[int, Callable[[RunRow], Any]] = {
        NAME: lambda r: r.name.lower(), STATE: lambda r: r.state,
        STRATEGY: lambda r: strategy_title(r.strategy).lower(), WHERE: lambda r: r.where,
        STARTED: lambda r: r.started, DURATION: lambda r: r.duration,
        STEPS: lambda r: r.steps, FINAL_LOSS: lambda r: r.final_loss,
        BEST_VAL: lambda r: r.best_val, TAGS: lambda r: ", ".join(r.tags).lower(),
        NOTE: lambda r: r.note.lower(),
    }
    return keys[column]


class RunsModel(QAbstractTableModel):
    """The rows; `watched`: folders of running runs a headless watcher follows. Edits of the
    Tags cell go to `on_edit(row, tags)`, of the Note cell (a note of one line, typed in
    place) to `on_note(row, text)` (each writes them off the UI thread). A run still
    training reads in bold, in the running colour."""

    def __init__(self, on_edit: Callable[[RunRow, list[str]], None] | None = None,
                 on_note: Callable[[RunRow, str], None] | None = None) -> None:
        super().__init__()
        self.on_note = on_note
        self.rows: list[RunRow] = []
        self.texts: list[str] = []  # each row's lowercased text, for the filter
        self.watched: set[str] = set()
        self.followed: set[str] = set()  # folders of the runs this window follows
        # running runs' progress (live rows), for the time left
        self.progress: dict[str, ScriptProgress] = {}
        self.expanded: set[str] = set()  # sweep folders whose trials are shown
        self.on_edit = on_edit
        self._sort: tuple[int, Qt.SortOrder] | None = None

    # -- contents ------------------------------------------------------------------------------
    def set_rows(self, rows: Sequence[RunRow], watched: set[str] | None = None,
                 texts: list[str] | None = None) -> None:
        """Show `rows`; `texts`: their `text()`s when made already (off the UI thread)."""
        self.beginResetModel()
        self.rows = list(rows)
        self.watched = set(watched or ())
        self.texts = texts if texts is not None and len(texts) == len(self.rows) \
            else [r.text() for r in self.rows]
        if self._sort is not None:
            self._sorted(*self._sort)
        self.endResetModel()

    def row_changed(self, row: RunRow) -> None:
        for i, r in enumerate(self.rows):
            if r is row:
                self.texts[i] = r.text()
                self.dataChanged.emit(self.index(i, 0), self.index(i, len(COLUMNS) - 1))
                return

    def remove(self, folders: set[str]) -> None:
        self.beginResetModel()
        self.rows = [r for r in self.rows if r.folder not in folders]
        self.texts = [r.text() for r in self.rows]
        self.endResetModel()

    def toggle(self, sweep: RunRow) -> None:
        if sweep.folder in self.expanded:
            self.expanded.discard(sweep.folder)
        else:
            self.expanded.add(sweep.folder)
        self.row_changed(sweep)

    # -- the Qt model ------------------------------------------------------------------------
    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's signature
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation,
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        return None

    def flags(self, index: Index) -> Qt.ItemFlag:
        flags = super().flags(index)
        editable = index.column() == TAGS or (
            index.column() == NOTE and index.isValid()
            and self.note_in_place(self.rows[index.row()]))
        return flags | Qt.ItemFlag.ItemIsEditable if editable else flags

    @staticmethod
    def note_in_place(row: RunRow) -> bool:
        """Its note is typed in its cell: none yet, or one line (more: a box of its own)."""
        return "\n" not in row.note.strip()

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        row, column = self.rows[index.row()], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self.text(row, column)
        if role == Qt.ItemDataRole.EditRole:
            return ", ".join(row.tags) if column == TAGS else row.note if column == NOTE \
                else self.text(row, column)
        if role == Qt.ItemDataRole.ToolTipRole:
            return self.tip(row, column)
        if role == Qt.ItemDataRole.TextAlignmentRole and column in NUMERIC:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == ROW_ROLE:
            return row
        if row.active and row.kind != SWEEP:
            if role == Qt.ItemDataRole.FontRole:
                return _bold()
            if role == Qt.ItemDataRole.ForegroundRole:
                return RUNNING_COLOUR
        return None

    def setData(self, index: Index, value: Any, role: int = Qt.ItemDataRole.EditRole) -> bool:
        if not index.isValid() or index.column() not in (TAGS, NOTE) \
                or role != Qt.ItemDataRole.EditRole:
            return False
        row = self.rows[index.row()]
        if index.column() == NOTE:
            if self.on_note is not None and str(value) != row.note:
                self.on_note(row, str(value))  # it keeps the note and shows it
            return True
        row.tags = split_tags(str(value))
        self.row_changed(row)
        if self.on_edit is not None:
            self.on_edit(row, row.tags)
        return True

    def text(self, row: RunRow, column: int) -> str:
        if column == NAME:
            if row.kind == SWEEP:
                arrow = "\u25be" if row.folder in self.expanded else "\u25b8"
                return f"{arrow} {row.name} (sweep)"
            return f"      {row.name}" if row.kind == TRIAL else row.name
        if column == STATE:
            if row.active and row.kind != SWEEP:
                return f"{row.state} · {self.follower(row)}"
            return row.state_text + (" · archived" if row.archived else "")
        values: dict[int, Callable[[], str]] = {
            STRATEGY: lambda: strategy_title(row.strategy) + (
                f" · {row.trained}" if row.trained else ""), WHERE: lambda: row.where,
            STARTED: lambda: when(row.started), DURATION: lambda: (self.time_left(row) if
            row.active else "") or duration_text(row.duration),
            STEPS: lambda: "" if row.steps is None else f"{row.steps:,} of {row.total_steps:,}"
            if row.active and row.total_steps else f"{row.steps:,}",
            FINAL_LOSS: lambda: significant(row.final_loss),
            BEST_VAL: lambda: significant(row.best_val), TAGS: lambda: ", ".join(row.tags),
            NOTE: lambda: note_line(row.note),
        }
        return values[column]()

    def follower(self, row: RunRow) -> str:
        """Who follows a running run: this window, a headless watcher, or nobody."""
        if row.folder in self.followed:
            return "followed"
        return "watched" if row.folder in self.watched else "not watched"

    def time_left(self, row: RunRow) -> str:
        """A running run's Duration: "1:10 left" at its pace ("" when it cannot be told)."""
        progress = self.progress.get(row.folder)
        left = progress.seconds_left() if progress is not None else None
        return f"{duration_text(left)} left" if left is not None else ""

    def tip(self, row: RunRow, column: int) -> str:
        if column == STATE and row.active and row.kind != SWEEP:
            return FOLLOWED_TIP if row.folder in self.followed else \
                WATCHED_TIP if row.folder in self.watched else UNWATCHED_TIP
        if column == DURATION and row.active and self.time_left(row):
            return f"About {self.time_left(row)} at the pace it trained so far."
        if column == STATE and row.message:
            return row.message
        if column == BEST_VAL and row.best_val_name:
            return (f"its best validation value{' so far' if row.active else ''}: "
                    f"{row.best_val_name} " + (
                        "(the best of its trials)" if row.kind == SWEEP else ""))
        if column == NOTE:
            return (row.note + "\n\n" if row.note else "") + (
                "Double-click to edit the note" if self.note_in_place(row)
                else "Double-click to edit the note (several lines)")
        if column == TAGS:
            return "Double-click to type tags, separated by commas"
        if column == DURATION and row.active and row.kind != SWEEP:
            return "Still training: how long it has been running"
        if column == NAME and row.kind == SWEEP:
            return f"{row.folder}\nClick the arrow to show its trials; double-click opens it."
        return row.folder

    # -- sorting -------------------------------------------------------------------------------
    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        if not 0 <= column < len(COLUMNS):
            return
        self.layoutAboutToBeChanged.emit()
        self._sort = (column, order)
        self._sorted(column, order)
        self.layoutChanged.emit()

    def _sorted(self, column: int, order: Qt.SortOrder) -> None:
        """Runs and sweeps sorted, each sweep's trials (sorted the same way) right after it
        (the filter's texts move with their rows)."""
        key = _sort_key(column)
        descending = order == Qt.SortOrder.DescendingOrder
        rows = self.rows

        def ordered(indexes: list[int]) -> list[int]:
            known = [i for i in indexes if key(rows[i]) is not None]
            known.sort(key=lambda i: key(rows[i]), reverse=descending)
            return known + [i for i in indexes if key(rows[i]) is None]

        trials: dict[str, list[int]] = {}
        for i, r in enumerate(rows):
            if r.kind == TRIAL:
                trials.setdefault(r.parent, []).append(i)
        out: list[int] = []
        for i in ordered([i for i, r in enumerate(rows) if r.kind != TRIAL]):
            out.append(i)
            if rows[i].kind == SWEEP:
                out += ordered(trials.pop(rows[i].folder, []))
        out += [i for group in trials.values() for i in group]
        self.rows = [rows[i] for i in out]
        if len(self.texts) == len(rows):
            self.texts = [self.texts[i] for i in out]


class RunsFilter(QSortFilterProxyModel):
    """Hides archived rows (unless shown), trials of a folded sweep (unless the text names
    them) and rows without every word of the text."""

    def __init__(self, model: RunsModel) -> None:
        super().__init__()
        self.runs = model
        self.setSourceModel(model)
        self.words: list[str] = []
        self.show_archived = False

    def set_text(self, text: str) -> None:
        self.beginFilterChange()
        self.words = text.lower().split()
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def set_show_archived(self, shown: bool) -> None:
        self.beginFilterChange()
        self.show_archived = shown
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def refilter(self) -> None:
        """Filter again (a row archived, a sweep folded or unfolded)."""
        self.beginFilterChange()
        self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    def filterAcceptsRow(self, source_row: int, source_parent: Index) -> bool:
        row = self.runs.rows[source_row]
        if row.archived and not self.show_archived:
            return False
        if self.words:
            text = self.runs.texts[source_row]
            return all(w in text for w in self.words)
        return row.kind != TRIAL or row.parent in self.runs.expanded
