"""The app's preferences (MLflow: whether runs are sent there, and where) and "Export to
MLflow". The file is written and runs exported off the UI thread."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QVBoxLayout,
    QWidget,
)

from dtgui.core.runs.records import RunRecord
from dtgui.core.tracking import (
    ENV,
    INSTALL_HINT,
    MLFLOW_ENV,
    TrackingPreference,
    embedded_uri,
    mlflow_installed,
    tracking_uri,
)
from dtgui.ui.workers import error_message, run_in_thread


class PreferencesDialog(QDialog):
    """MLflow: on or off, the tracking URI ("" = MLFLOW_TRACKING_URI, else dtgui's own
    SQLite store); where MLflow is not installed, how to get it."""

    def __init__(self, parent: QWidget | None = None,
                 preference: TrackingPreference | None = None,
                 installed: bool | None = None, environ: dict[str, str] | None = None) -> None:
        super().__init__(parent)
        import os

        self.setWindowTitle("Preferences")
        self.setMinimumWidth(560)
        env = dict(os.environ) if environ is None else environ
        pref = preference if preference is not None else TrackingPreference.load()
        layout = QVBoxLayout(self)
        title = QLabel("<b>MLflow</b>")
        layout.addWidget(title)
        about = QLabel("Send every run (its settings, curves by step, final state and model) "
                       "and every sweep (its trials nested) to MLflow while it trains. The "
                       "training machines need nothing: dtgui sends what it follows.")
        about.setWordWrap(True)
        layout.addWidget(about)
        form = QFormLayout()
        self.enabled = QCheckBox("Send runs to MLflow")
        env_uri = env.get(MLFLOW_ENV, "")
        self.enabled.setChecked(pref.enabled if pref.enabled is not None else bool(env_uri))
        form.addRow(self.enabled)
        self.uri = QLineEdit(pref.uri)
        self.uri.setPlaceholderText(env_uri or embedded_uri())
        self.uri.setToolTip("A tracking server (http://host:5000) or a SQLite file "
                            "(sqlite:///path/mlflow.db). Empty: MLFLOW_TRACKING_URI when "
                            "set, else dtgui's own store.")
        form.addRow("Tracking URI:", self.uri)
        layout.addLayout(form)
        notes = []
        if not (mlflow_installed() if installed is None else installed):
            notes.append(INSTALL_HINT)
        if env.get(ENV):
            notes.append(f"This session was started with --mlflow {env[ENV]}: it decides "
                         "until dtgui is started again.")
        self.note = QLabel(" ".join(notes))
        self.note.setObjectName("errorText")
        self.note.setWordWrap(True)
        self.note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.note.setVisible(bool(notes))
        layout.addWidget(self.note)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save
                                   | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def preference(self) -> TrackingPreference:
        return TrackingPreference(self.enabled.isChecked(), self.uri.text().strip())

    def accept(self) -> None:
        chosen = self.preference()
        parent = self.parentWidget()

        def failed(exc: BaseException) -> None:
            QMessageBox.warning(parent, "Preferences", f"Could not save: {error_message(exc)}")

        run_in_thread(chosen.save, lambda _r: None, failed)
        super().accept()


def export_to_mlflow(parent: QWidget, records: Sequence[RunRecord]) -> None:
    """The Runs page's "Export to MLflow" on the selected runs (off the UI thread): each sent
    again to where runs go (dtgui's own store when sending is off); a run already there is
    updated. Says where they went, or why not."""
    from dtgui.launch.trackers.mlflow_runs import send_past_run

    if not mlflow_installed():
        QMessageBox.information(parent, "Export to MLflow", INSTALL_HINT)
        return
    def export() -> list[str]:
        uri = tracking_uri() or embedded_uri()  # reads the preferences: off the UI thread
        return [f"Sent to {uri}:", *(f"{r.run_name}: {send_past_run(r, uri)}" for r in records)]

    def done(lines: list[str]) -> None:
        QMessageBox.information(parent, "Export to MLflow", "\n".join(lines))

    def failed(exc: BaseException) -> None:
        QMessageBox.warning(parent, "Export to MLflow", error_message(exc))

    run_in_thread(export, done, failed, context=parent)
