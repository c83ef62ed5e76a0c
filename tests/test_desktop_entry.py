"""The desktop entry's Exec quoting and where entries go (XDG Base Directory rules)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dtgui.core.desktop import desktop_entry, desktop_exec, install_desktop, xdg_data_home


def test_exec_quoting_follows_the_desktop_entry_specification() -> None:
    assert desktop_exec(["/opt/dtgui/bin/dtgui"]) == "/opt/dtgui/bin/dtgui"
    assert desktop_exec(["/home/me/my venv/bin/python", "-m", "dtgui"]) == \
        '"/home/me/my venv/bin/python" -m dtgui'
    assert desktop_exec(["/x/100%/dtgui"]) == "/x/100%%/dtgui"
    # `$` and `"` are escaped inside the quotes; a backslash becomes four (quote escape, then
    # the string escape on top).
    assert desktop_exec(['/a$b"c\\d']) == '"/a\\\\$b\\\\"c\\\\\\\\d"'
    for bad in (["/a\nb"], [""]):
        with pytest.raises(ValueError):
            desktop_exec(bad)


def test_the_entry_runs_the_given_command(tmp_path: Path) -> None:
    text = desktop_entry(["/v/bin/dtgui"])
    assert text.count("\nExec=") == 1 and "\nExec=/v/bin/dtgui\n" in text
    written = install_desktop(["/v/bin/dtgui"], tmp_path)
    assert written == [tmp_path / "applications" / "dtgui.desktop",
                       tmp_path / "icons" / "hicolor" / "scalable" / "apps" / "dtgui.svg"]


def test_xdg_data_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for unusable in ("", "relative/share"):
        monkeypatch.setenv("XDG_DATA_HOME", unusable)
        assert xdg_data_home() == tmp_path / ".local" / "share"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert xdg_data_home() == tmp_path / ".local" / "share"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert xdg_data_home() == tmp_path / "data"
