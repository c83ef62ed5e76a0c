"""What a person writes on the Runs page's rows: tags and a note (typed in their cells, or a
note of several lines in a box of its own), and archived or not; each kept as written, in
the run's notes (`dtgui.launch.run_admin.set_notes`), written off the UI thread."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QInputDialog, QWidget

from dtgui.core.runs.run_index import RunRow
from dtgui.ui.pages.runs_model import RunsModel
from dtgui.ui.workers import run_in_thread


class RunNotes:
    """Writes the rows' tags, notes and archived flags of `model`'s rows; a failure to write
    goes to `failed`; `page` asks for a note of several lines and holds the writes."""

    def __init__(self, page: QWidget, model: RunsModel,
                 failed: Callable[[BaseException], None]) -> None:
        self.page = page
        self.model = model
        self.failed = failed

    def tags_edited(self, row: RunRow, tags: list[str]) -> None:
        """Keep the tags typed in the row's cell (the model shows them already)."""
        from dtgui.launch.run_admin import set_notes

        run_in_thread(lambda: set_notes(row.folder, tags=tags), lambda _: None, self.failed,
                      context=self.page)

    def ask_note(self, row: RunRow) -> tuple[str, bool]:
        return QInputDialog.getMultiLineText(self.page, "Note", f"A note on {row.name}:",
                                             row.note)

    def edit_note(self, row: RunRow) -> None:
        text, ok = self.ask_note(row)
        if ok:
            self.set_note(row, text)

    def set_note(self, row: RunRow, text: str) -> None:
        """Keep `text` (as typed: every line and character) as the run's note."""
        from dtgui.launch.run_admin import set_notes

        row.note = text
        self.model.row_changed(row)
        run_in_thread(lambda: set_notes(row.folder, note=text), lambda _: None, self.failed,
                      context=self.page)

    def archive(self, rows: list[RunRow]) -> None:
        """Archive these rows, or bring them back when every one of them is archived."""
        from dtgui.launch.run_admin import set_notes

        archived = not all(r.archived for r in rows)
        for row in rows:
            row.archived = archived
            self.model.row_changed(row)
        run_in_thread(lambda: [set_notes(r.folder, archived=archived) for r in rows],
                      lambda _: None, self.failed, context=self.page)
