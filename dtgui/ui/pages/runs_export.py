"""Export bundle… on the Runs page: the run's bundle written into a directory asked for, off
the UI thread (`dtgui.launch.run_admin.export_run`), then where it went and how to run it
without dtgui, or why it was not written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from dtgui.core.runs.run_index import RunRow
from dtgui.ui.workers import error_message, run_in_thread


class RunExport(QObject):
    """Exports one run at a time, asked through `page`; `say(title, text)` tells why it was
    not written, `tell(text)` where it was."""

    def __init__(self, page: QWidget, say: Callable[[str, str], None],
                 tell: Callable[[str], None]) -> None:
        super().__init__(page)
        self.page = page
        self.say = say
        self.tell = tell

    def ask_dir(self) -> str:
        return QFileDialog.getExistingDirectory(self.page, "Export the run's bundle into",
                                                str(Path.home()))

    def export(self, row: RunRow) -> None:
        from dtgui.launch.run_admin import export_destination, export_run

        chosen = self.ask_dir()
        if not chosen:
            return

        def write() -> tuple[Path, str]:
            return export_run(row.folder, export_destination(Path(chosen),
                                                             Path(row.folder).name))

        run_in_thread(write, self._exported, self._failed, context=self)

    def _exported(self, written: tuple[Path, str]) -> None:
        path, how = written
        self.tell(f"Exported to {path}")
        QMessageBox.information(self.page, "Bundle exported",
                                f"Wrote {path}.\n\nReproduce the run without dtgui: {how}")

    def _failed(self, exc: BaseException) -> None:
        self.say("Export bundle", error_message(exc))
