"""A user's own training script in the pure-Python core: ignore rules, variables, plan,
bundle, scalar events, command line. No TensorFlow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dtgui.core.bundles.bundle import Bundle, render_bundle
from dtgui.core.bundles.ignore import is_ignored, list_project, parse_rules
from dtgui.core.events import Event, parse_line
from dtgui.core.live_run import LiveRun
from dtgui.core.plans.placement import place_local
from dtgui.core.plans.plan import ModelFile, Plan, validate
from dtgui.core.plans.strategies import Strategy
from dtgui.core.scalars import is_loss_tag
from dtgui.core.scripts.script import (
    ScriptModel,
    parse_env_lines,
    script_problems,
    split_args,
)
from dtgui.worker.script_env import expand_references

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("rules", "path", "is_dir", "ignored"), [
    ("*.log", "a.log", False, True),
    ("*.log", "deep/er/a.log", False, True),
    ("*.log\n!keep.log", "keep.log", False, False),
    ("*.log\n!keep.log", "x/keep.log", False, False),
    ("build/", "build", True, True),
    ("build/", "build", False, False),  # a file named build: dir-only rule
    ("build/", "src/build", True, True),
    ("/build", "src/build", True, False),  # anchored at the top
    ("/build", "build", False, True),
    ("doc/frotz", "doc/frotz", True, True),
    ("doc/frotz", "a/doc/frotz", True, False),  # a middle slash anchors it
    ("**/foo", "a/b/foo", False, True),
    ("**/foo/bar", "x/foo/bar", False, True),
    ("abc/**", "abc/x/y", False, True),
    ("abc/**", "abc", True, False),
    ("a/**/b", "a/b", False, True),
    ("a/**/b", "a/x/y/b", False, True),
    ("a?c", "abc", False, True),
    ("a?c", "a/c", False, False),  # ? never matches /
    ("*.[oa]", "lib.a", False, True),
    ("*.[!oa]", "lib.c", False, True),
    ("*.[!oa]", "lib.o", False, False),
    ("\\#notes", "#notes", False, True),
    ("# a comment\n\n", "# a comment", False, False),
    ("\\!important", "!important", False, True),
    ("trailing   ", "trailing", False, True),
    ("data/*\n!data/small.csv", "data/small.csv", False, False),
    ("data/*\n!data/small.csv", "data/big.csv", False, True),
])
def test_gitignore_rules(rules: str, path: str, is_dir: bool, ignored: bool) -> None:
    assert is_ignored(parse_rules(rules), path, is_dir) is ignored


def test_project_listing_skips_vcs_caches_venvs_links_and_ignored(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"x")
    (tmp_path / "pkg" / "m.py").write_text("x = 1\n")
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / ".git" / "objects").mkdir(parents=True)
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "pyvenv.cfg").write_text("")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "x.txt").write_text("x")
    (tmp_path / "data.csv").write_text("1\n")
    (tmp_path / "outside").symlink_to("/tmp", target_is_directory=True)
    (tmp_path / ".gitignore").write_text("runs/\n*.csv\n")
    (tmp_path / ".dtguiignore").write_text("runs/\n")  # wins over .gitignore: csv kept
    listing = list_project(tmp_path)
    assert listing.files == [".dtguiignore", ".gitignore", "data.csv", "pkg/m.py", "train.py"]
    assert listing.rules_from == ".dtguiignore"
    assert listing.total_bytes == sum((tmp_path / f).stat().st_size for f in listing.files)
    assert any(s.startswith("env/") and "virtualenv" in s for s in listing.skipped)
    assert any(s.startswith("outside/") for s in listing.skipped)


def test_env_lines_are_validated_with_reasons() -> None:
    env, problems = parse_env_lines("A=1\n# comment\n\nB = two words\nC=x=y\n")
    assert env == {"A": "1", "B": " two words", "C": "x=y"} and problems == []
    _, problems = parse_env_lines("1BAD=x\nno_equals\nTF_CONFIG=x\nDTGUI_TASK=x\nA=1\nA=2\n")
    assert len(problems) == 5
    assert "not a variable name" in problems[0]
    assert "not KEY=VALUE" in problems[1]
    assert "set by dtgui" in problems[2] and "set by dtgui" in problems[3]
    assert "set twice" in problems[4]
    model = ScriptModel("/p", "t.py", env={"X": "a\nb"})
    assert any("line break" in p for p in script_problems(model))


def test_arguments_and_references() -> None:
    assert split_args("--epochs 3 --name 'a b'") == (["--epochs", "3", "--name", "a b"], "")
    assert split_args("'open")[1]
    values = {"DTGUI_TENSORBOARD_DIR": "/r/tb"}
    assert expand_references("--logdir=$DTGUI_TENSORBOARD_DIR/x", values) == "--logdir=/r/tb/x"
    assert expand_references("${DTGUI_TENSORBOARD_DIR}", values) == "/r/tb"
    assert expand_references("$HOME $DTGUI_UNKNOWN", values) == "$HOME $DTGUI_UNKNOWN"


def test_plan_round_trips_and_old_plans_still_read(tmp_path: Path) -> None:
    model = ScriptModel(str(tmp_path), "train.py", ("--x", "1"), {"K": "v"}, True)
    plan = Plan(model=model)
    assert Plan.from_dict(json.loads(plan.to_json())).model == model
    old = json.loads(Plan().to_json())
    old["model"] = {"kind": "file", "path": "user_model.py"}
    assert Plan.from_dict(old).model == ModelFile("user_model.py")
    bad = Plan(model=ScriptModel(str(tmp_path), "../evil.py"))
    assert any("inside the project folder" in p for p in validate(bad))


def script_bundle(tmp_path: Path, **changes: Any) -> Bundle:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    model = ScriptModel(str(project), "train.py", ("--logdir", "$DTGUI_TENSORBOARD_DIR"),
                        {"MY_FLAG": "1"}, True, "/data/set")
    plan = Plan(run_name="s", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                replicas_per_task=1, model=model, **changes)
    return render_bundle(place_local(plan), tmp_path / "bundle")


def test_bundle_holds_the_project_and_each_task_its_variables(tmp_path: Path) -> None:
    bundle = script_bundle(tmp_path, precision="mixed_bfloat16", xla=True)
    assert (bundle.path / "project" / "train.py").is_file()
    assert not (bundle.path / "data").exists()
    saved = json.loads((bundle.path / "plan.json").read_text())["model"]
    assert saved["project"] == "project" and saved["legacy_keras"] is True
    task = (bundle.path / "tasks" / "worker-1.sh").read_text()
    for line in ("export DTGUI_TASK=worker:1", "export DTGUI_TASK_TYPE=worker",
                 "export DTGUI_TASK_INDEX=1", "export DTGUI_PRECISION=mixed_bfloat16",
                 "export DTGUI_XLA=1", "export TF_USE_LEGACY_KERAS=1", "export MY_FLAG=1",
                 "export DTGUI_DATASET_DIR=/data/set", "export DTGUI_GLOBAL_BATCH=64"):
        assert line in task
    assert "TF_CONFIG=" in task
    requirements = (bundle.path / "requirements.txt").read_text()
    assert "tf-keras==" in requirements and "tensorboard==" in requirements
    readme = (bundle.path / "README.md").read_text()
    assert "## Your training script" in readme and "train.py --logdir" in readme


def test_missing_project_or_entry_is_refused(tmp_path: Path) -> None:
    from dtgui.core.bundles.bundle import BundleError

    model = ScriptModel(str(tmp_path / "nope"), "train.py")
    with pytest.raises(BundleError, match="does not exist"):
        render_bundle(place_local(Plan(model=model)), tmp_path / "b")
    assert not (tmp_path / "b").exists()


def scalar(task: str, tag: str, step: int, value: float) -> Event:
    line = json.dumps({"v": 2, "kind": "scalar", "task": task, "t": 1.0, "tag": tag,
                       "step": step, "value": value})
    event = parse_line(line)
    assert event is not None
    return event


def test_scalar_events_become_series_per_tag_and_task() -> None:
    metrics = LiveRun(10)
    metrics.add_events([scalar("worker:0", "train/batch_loss", s, 1.0 / s) for s in (1, 2, 3)])
    metrics.add_events([scalar("worker:1", "train/batch_loss", 1, 0.9),
                        scalar("worker:0", "train/epoch_loss", 0, 0.7)])
    snap = metrics.scalars.snapshot()
    assert list(snap["train/batch_loss"]["worker:0"][0]) == [1, 2, 3]
    assert set(snap["train/batch_loss"]) == {"worker:0", "worker:1"}
    assert metrics.snapshot().step == 3  # batch steps drive the progress, epochs do not
    # a restarted script logs step 2 again: the curve continues from there
    metrics.add_events([scalar("worker:0", "train/batch_loss", 2, 5.0)])
    steps, values = metrics.scalars.snapshot()["train/batch_loss"]["worker:0"]
    assert list(steps) == [1, 2] and values[-1] == 5.0
    loss = metrics.scalars.loss_series()
    assert list(loss["worker:0"][0]) == [1, 2]  # per-step loss preferred to per-epoch
    assert is_loss_tag("epoch_loss") and not is_loss_tag("validation/epoch_loss")


def test_cli_export_script_options(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    run = [sys.executable, "-m", "dtgui", "export"]
    ok = subprocess.run([*run, str(tmp_path / "b"), "--strategy", "one_device", "--script",
                         str(project / "train.py"), "--script-arg=--epochs=2",
                         "--env", "A=1", "--legacy-keras"],
                        capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert ok.returncode == 0, ok.stderr
    model = json.loads((tmp_path / "b" / "plan.json").read_text())["model"]
    assert model["entry"] == "train.py" and model["args"] == ["--epochs=2"]
    assert model["env"] == {"A": "1"} and model["legacy_keras"] is True
    bad = subprocess.run([*run, str(tmp_path / "c"), "--script", str(project / "train.py"),
                          "--env", "1X=2", "--env", "novalue"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert bad.returncode == 2 and "not a variable name" in bad.stderr
    assert "not KEY=VALUE" in bad.stderr and not (tmp_path / "c").exists()
    lone = subprocess.run([*run, str(tmp_path / "d"), "--legacy-keras"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert lone.returncode == 2 and "--legacy-keras needs --script" in lone.stderr


def test_cli_export_script_placed_on_machines(tmp_path: Path) -> None:
    config = Path(__import__("os").environ["DTGUI_CONFIG_DIR"])
    config.mkdir(parents=True, exist_ok=True)
    (config / "machines.toml").write_text(
        'schema = 1\n\n[[machines]]\nname = "h2"\nhost = "10.0.0.2"\nuser = "alice"\n\n'
        '[[machines]]\nname = "h3"\nhost = "10.0.0.3"\nuser = "bob"\n', encoding="utf-8")
    from dtgui.cli import main

    project = ROOT / "tests" / "script_projects" / "mwm_fit"
    out = tmp_path / "placed"
    code = main(["export", str(out), "--strategy", "multi_worker_mirrored", "--workers-on",
                 "h2,h3", "--script", str(project / "main.py"), "--legacy-keras",
                 "--script-arg=2"])
    assert code == 0
    plan = json.loads((out / "plan.json").read_text())
    assert [t["machine"] for t in plan["tasks"]] == ["h2", "h3"]
    assert plan["model"]["project"] == "project" and (out / "project" / "mnist_setup.py").is_file()
    readme = (out / "README.md").read_text()
    assert "bash run.sh h2" in readme and "## Your training script" in readme
    refused = main(["export", str(tmp_path / "refused"), "--strategy", "multi_worker_mirrored",
                    "--workers-on", "h2,h3", "--script", str(project / "main.py")])
    assert refused == 2 and not (tmp_path / "refused").exists()
