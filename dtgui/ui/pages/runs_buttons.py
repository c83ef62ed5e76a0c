"""The Runs page's buttons under its table, each enabled by what is selected: Reattach (a
run still training), Open (an ended run or a sweep), Compare (two runs or more), Clone,
Export and Delete (one run), Archive or Unarchive (any rows), Refresh."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QPushButton, QWidget

from dtgui.core.runs.run_index import SWEEP, RunRow


class RunsButtons(QWidget):
    """The row of buttons; `enable_for(chosen)` after each change of the selection."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.refresh_button = QPushButton("Refresh")
        self.reattach_button = QPushButton("Reattach")
        self.reattach_button.setObjectName("primaryButton")
        self.reattach_button.setToolTip("Follow this run again: its curves, logs and tasks, "
                                        "including what happened while dtgui was closed.")
        self.open_button = QPushButton("Open")
        self.open_button.setToolTip("Show this run's curves and logs (a sweep: its view).")
        self.compare_button = QPushButton("Compare")
        self.compare_button.setObjectName("compareButton")
        self.compare_button.setToolTip("Select several runs (Ctrl- or Shift-click), then "
                                       "compare their loss curves, settings and results.")
        self.clone_button = QPushButton("Clone into the wizard")
        self.clone_button.setToolTip("Open the wizard filled with this run's setup: change "
                                     "what you like and launch.")
        self.export_button = QPushButton("Export bundle…")
        self.export_button.setToolTip("Write this run's bundle into a directory: it runs "
                                      "without dtgui.")
        self.archive_button = QPushButton("Archive")
        self.archive_button.setToolTip("Hide the selected runs from the list (Show archived "
                                       "shows them again).")
        self.delete_button = QPushButton("Delete…")
        self.delete_button.setObjectName("deleteButton")
        self.delete_button.setToolTip("Delete the run's folder and record (asks first; also "
                                      "its copies on the machines, when you say so).")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for button in (self.reattach_button, self.open_button, self.compare_button,
                       self.clone_button, self.export_button):
            layout.addWidget(button)
        layout.addStretch(1)
        for button in (self.archive_button, self.delete_button, self.refresh_button):
            layout.addWidget(button)

    def enable_for(self, chosen: list[RunRow]) -> None:
        """Each button enabled when it acts on the rows `chosen` (the selection)."""
        row = chosen[0] if len(chosen) == 1 else None
        run = row is not None and row.kind != SWEEP
        self.reattach_button.setEnabled(run and row is not None and row.active)
        self.open_button.setEnabled(row is not None and (row.kind == SWEEP or not row.active))
        self.compare_button.setEnabled(len([r for r in chosen if r.kind != SWEEP]) >= 2)
        self.clone_button.setEnabled(run)
        self.export_button.setEnabled(run)
        self.delete_button.setEnabled(run)
        self.archive_button.setEnabled(bool(chosen))
        self.archive_button.setText("Unarchive" if chosen and all(r.archived for r in chosen)
                                    else "Archive")
