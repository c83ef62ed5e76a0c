"""Names and paths that end in a line break are refused like any other bad value.

A regular expression anchored with `$` also matches before a final newline, so `re.match`
accepted "demo\\n" and the bundle's task scripts then failed with "Syntax error"; every
validation matches the whole value instead.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dtgui.cli import main
from dtgui.core.bundles.bundle import BundleError, render_bundle
from dtgui.core.machines.registry import (
    Machine,
    MachineError,
    host_problem,
    parse_jump_spec,
    user_problem,
)
from dtgui.core.plans.placement import place_local
from dtgui.core.plans.plan import Plan, PlanError, validate


@pytest.mark.parametrize("name", ["demo\n", "demo\r\n", "\ndemo", "de\nmo"])
def test_a_run_name_with_a_line_break_is_refused(name: str, tmp_path: Path) -> None:
    problems = validate(Plan(run_name=name))
    assert any(p.startswith("Run name:") for p in problems)
    with pytest.raises(PlanError, match="Run name"):
        render_bundle(place_local(Plan(run_name=name)), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_machine_user_and_host_names_with_a_trailing_newline_are_refused() -> None:
    assert user_problem("alice\n") and not user_problem("alice")
    assert host_problem("gpu1.lab.example\n") and not host_problem("gpu1.lab.example")
    assert host_problem("10.0.0.2\n")
    assert parse_jump_spec("me@gw.example:22") == ("me", "gw.example", 22)
    for machine in (Machine(name="gpu1\n", host="gpu1.example", user="alice"),
                    Machine(name="gpu1", host="gpu1.example", user="alice\n"),
                    Machine(name="gpu1", host="gpu1.example\n", user="alice")):
        assert machine.problems(), machine
    with pytest.raises(MachineError, match="not a valid login name"):  # from machines.toml
        Machine.from_dict({"name": "gpu1", "host": "gpu1.example", "user": "alice\n"})


def _export(out: str, *opts: str) -> int:
    return main(["export", out, "--run-name", "names", "--steps", "5", *opts])


def test_export_refuses_a_run_name_machine_or_python_ending_in_a_newline(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    registry = Path(os.environ["DTGUI_CONFIG_DIR"]) / "machines.toml"
    registry.parent.mkdir(parents=True, exist_ok=True)
    registry.write_text('schema = 1\n\n[[machines]]\nname = "h2"\nhost = "10.0.0.2"\n'
                        'user = "alice"\n')
    out = tmp_path / "out"
    assert main(["export", str(out), "--run-name", "names\n"]) == 2
    assert "Run name" in capsys.readouterr().err
    mwm = ("--strategy", "multi_worker_mirrored", "--replicas", "1")
    assert _export(str(out), *mwm, "--workers-on", "h2,h2",
                   "--python", "h2=/usr/bin/python3;x") == 2
    assert "give the interpreter's plain path" in capsys.readouterr().err
    assert not out.exists()
    # Blanks around an option's parts (a pasted line break) are dropped: h2 and its Python.
    assert _export(str(out), *mwm, "--on", "worker:1=h2\n", "--workers", "2",
                   "--python", "h2=/usr/bin/python3\n") == 0
    plan = json.loads((out / "plan.json").read_text())
    assert [t["machine"] for t in plan["tasks"]] == ["", "h2"]
    assert plan["machines"]["h2"]["python"] == "/usr/bin/python3"


def test_export_to_a_directory_whose_name_ends_in_a_newline_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parent = tmp_path / "parent"
    assert _export(str(parent / "bundle\n")) == 2
    err = capsys.readouterr().err
    assert err.startswith("dtgui export: ") and "line break" in err and "bundle\\n" in err
    assert not parent.exists()
    with pytest.raises(BundleError, match="line break"):
        render_bundle(place_local(Plan(run_name="names")), tmp_path / "a\tb")
    assert list(tmp_path.iterdir()) == []
