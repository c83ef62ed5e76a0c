"""Delete… on the Runs page: refused while the run trains; else asked first (also its copies
on the machines, when it has any), then deleted off the UI thread
(`dtgui.launch.run_admin.delete_run`, in its safe order), and what was done said."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QCheckBox, QMessageBox, QWidget

from dtgui.core.runs.records import RunHistory
from dtgui.core.runs.run_index import RunRow
from dtgui.ui.workers import error_message, run_in_thread

if TYPE_CHECKING:
    from dtgui.launch.run_admin import Deleted


class RunDelete(QObject):
    """Deletes one run at a time, asked through `page`; `say(title, text)` tells why
    something was not done, `tell(text)` what is being or was done, `failed` why its record
    could not be read."""

    deleted = Signal(str)  # the folder of the run deleted from this machine

    def __init__(self, page: QWidget, say: Callable[[str, str], None],
                 tell: Callable[[str], None], failed: Callable[[BaseException], None]) -> None:
        super().__init__(page)
        self.page = page
        self.say = say
        self.tell = tell
        self.failed = failed

    def confirm(self, row: RunRow, copies: list[str]) -> tuple[bool, bool]:
        """(delete, also the copies on the machines), asked."""
        box = QMessageBox(QMessageBox.Icon.Warning, "Delete the run",
                          f"Delete {row.name}? Its folder, curves, logs, checkpoints and "
                          f"record are removed from this machine:\n{row.folder}",
                          parent=self.page)
        check = None
        if copies:
            check = QCheckBox("Also delete its copies on " + ", ".join(copies))
            box.setCheckBox(check)
        delete = box.addButton("Delete", QMessageBox.ButtonRole.DestructiveRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        return box.clickedButton() is delete, check is not None and check.isChecked()

    def delete(self, row: RunRow) -> None:
        """Delete the run of `row`, asked first; refused while it trains."""
        if row.active:
            self.say("The run is still training",
                     f"{row.name} is still training: stop it first (Reattach, then Stop), or "
                     "wait for it to end. Then delete it.")
            return
        run_in_thread(lambda: _copies(row), lambda copies: self._ask(row, copies),
                      self.failed, context=self)

    def _ask(self, row: RunRow, copies: list[str]) -> None:
        from dtgui.launch.run_admin import delete_run

        delete, remote = self.confirm(row, copies)
        if not delete:
            return
        self.tell(f"Deleting {row.name}…")
        run_in_thread(lambda: delete_run(row.folder, remote=remote),
                      lambda done: self._deleted(row, done), self._not_deleted, context=self)

    def _deleted(self, row: RunRow, done: Deleted) -> None:
        if done.local:
            self.tell(done.text())
            self.deleted.emit(row.folder)
        else:
            self.say("The run was kept", done.text())

    def _not_deleted(self, exc: BaseException) -> None:
        self.say("The run was not deleted", error_message(exc))


def _copies(row: RunRow) -> list[str]:
    """The machines keeping a copy of the run (read from its record)."""
    from dtgui.launch.run_admin import remote_copies

    record = RunHistory.read(Path(row.folder))
    return [m.name for m in remote_copies(record)] if record is not None else []
