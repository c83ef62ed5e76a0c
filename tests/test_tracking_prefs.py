"""Where runs are sent to MLflow: the preference, --mlflow and MLFLOW_TRACKING_URI, and the
Preferences dialog that sets it (saying how to install MLflow where it is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from dtgui.cli.main import build_parser
from dtgui.cli.tracking import apply_mlflow_option
from dtgui.core.tracking import (
    ENV,
    INSTALL_HINT,
    MLFLOW_ENV,
    TrackingPreference,
    embedded_uri,
    tracking_uri,
)


def test_the_command_line_then_the_preference_then_mlflows_variable_decide(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "")  # --mlflow sets it: undone after the test
    monkeypatch.delenv(MLFLOW_ENV, raising=False)
    assert tracking_uri() == ""  # off unless asked for
    monkeypatch.setenv(MLFLOW_ENV, "http://team:5000")
    assert tracking_uri() == "http://team:5000"
    TrackingPreference(False).save()
    assert tracking_uri() == ""
    TrackingPreference(True).save()
    assert tracking_uri() == "http://team:5000"
    monkeypatch.delenv(MLFLOW_ENV)
    assert tracking_uri() == embedded_uri()
    assert embedded_uri().startswith("sqlite:///") and embedded_uri().endswith("/mlflow.db")
    TrackingPreference(True, "sqlite:////tmp/x.db").save()
    assert tracking_uri() == "sqlite:////tmp/x.db"
    apply_mlflow_option(build_parser().parse_args(["run", "b", "--mlflow", "off"]))
    assert tracking_uri() == ""
    apply_mlflow_option(build_parser().parse_args(["--mlflow", "default"]))
    assert tracking_uri() == embedded_uri()
    args = build_parser().parse_args(["sweep", "out", "--mlflow", "http://other:5000"])
    apply_mlflow_option(args)
    assert tracking_uri() == "http://other:5000"


@pytest.mark.gui
def test_the_preferences_dialog_saves_the_choice_and_says_how_to_get_mlflow(
        qtbot: QtBot, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from dtgui.ui.dialogs.preferences import PreferencesDialog

    monkeypatch.setenv(ENV, "")
    dialog = PreferencesDialog(None, TrackingPreference(), installed=False, environ={})
    qtbot.addWidget(dialog)
    dialog.show()
    assert not dialog.enabled.isChecked()
    assert dialog.note.isVisible() and INSTALL_HINT in dialog.note.text()
    assert dialog.uri.placeholderText() == embedded_uri()
    dialog.enabled.setChecked(True)
    dialog.uri.setText(" http://team:5000 ")
    dialog.accept()
    qtbot.waitUntil(lambda: TrackingPreference.load() == TrackingPreference(
        True, "http://team:5000"), timeout=10_000)
    installed = PreferencesDialog(None, TrackingPreference.load(), installed=True,
                                  environ={MLFLOW_ENV: "http://env:5000"})
    qtbot.addWidget(installed)
    installed.show()
    assert installed.enabled.isChecked() and installed.uri.text() == "http://team:5000"
    assert not installed.note.isVisible()
