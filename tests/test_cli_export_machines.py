"""`dtgui export` with machine options: the real CLI, a real registry file, no
network (nothing is contacted at export time)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

import dtgui.core.plans.placement as placement
from dtgui.cli import main

REGISTRY = """schema = 1

[[machines]]
name = "h2"
host = "10.0.0.2"
user = "alice"

[[machines]]
name = "h3"
host = "gpu3.lab.example"
port = 2222
user = "bob"

[[machines]]
name = "lo"
host = "127.0.0.1"
user = "me"
"""


@pytest.fixture()
def registry() -> Path:
    path = Path(os.environ["DTGUI_CONFIG_DIR"]) / "machines.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(REGISTRY, encoding="utf-8")
    return path


def export(out: Path, *opts: str) -> int:
    return main(["export", str(out), "--run-name", "cli-mh", "--steps", "5", *opts])


def tasks_of(out: Path) -> dict[str, dict[str, Any]]:
    plan = json.loads((out / "plan.json").read_text())
    return {f"{t['type']}:{t['index']}": t for t in plan["tasks"]}


def tf_config(out: Path, stem: str) -> dict[str, Any]:
    """TF_CONFIG as the task script exports it (parsed the way sh does)."""
    for line in (out / "tasks" / f"{stem}.sh").read_text().splitlines():
        if line.startswith("export TF_CONFIG="):
            config: dict[str, Any] = json.loads(
                shlex.split(line.removeprefix("export "))[0].split("=", 1)[1])
            return config
    raise AssertionError(f"{stem}.sh exports no TF_CONFIG")


def test_multi_worker_on_three_machines(registry: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "b"
    assert export(out, "--strategy", "multi_worker_mirrored", "--workers-on", "local,h2,H2,h3",
                  "--address", "local=10.0.0.1", "--python", "h3=/opt/venv/bin/python") == 0
    err = capsys.readouterr().err
    assert "NOT checked" in err and "h2: 23456-23457" in err
    plan = json.loads((out / "plan.json").read_text())
    assert plan["workers"] == 4  # --workers-on sets the number of workers
    placed = {tid: (t["machine"] or "local", t["host"], t["port"])
              for tid, t in tasks_of(out).items()}
    assert placed == {"worker:0": ("local", "10.0.0.1", 23456),
                      "worker:1": ("h2", "10.0.0.2", 23456),
                      "worker:2": ("h2", "10.0.0.2", 23457),
                      "worker:3": ("h3", "gpu3.lab.example", 23456)}
    cluster = ["10.0.0.1:23456", "10.0.0.2:23456", "10.0.0.2:23457", "gpu3.lab.example:23456"]
    assert plan["cluster"] == {"worker": cluster}
    for i in range(4):
        assert tf_config(out, f"worker-{i}") == {"cluster": {"worker": cluster},
                                                 "task": {"type": "worker", "index": i}}
    assert plan["machines"]["h2"] == {"address": "10.0.0.2", "login": "alice@10.0.0.2:22",
                                      "python": "python3"}
    assert plan["machines"]["h3"]["python"] == "/opt/venv/bin/python"
    readme = (out / "README.md").read_text()
    assert "ssh alice@10.0.0.2 'cd dtgui-cli-mh && PYTHON=python3 bash run.sh h2'" in readme
    assert ("ssh -p 2222 bob@gpu3.lab.example 'cd dtgui-cli-mh && "
            "PYTHON=/opt/venv/bin/python bash run.sh h3'") in readme
    assert "scp -r -P 2222 . bob@gpu3.lab.example:dtgui-cli-mh" in readme
    assert "bash run.sh local" in readme
    # run.sh picks a machine's tasks; with no (or an unknown) machine it runs nothing
    assert subprocess.run(["bash", "-n", str(out / "run.sh")]).returncode == 0
    usage = subprocess.run(["bash", str(out / "run.sh"), "nope"], capture_output=True, text=True)
    assert usage.returncode == 2 and "local h2 h3" in usage.stderr
    assert "h2) TASKS=(worker-1 worker-2)" in (out / "run.sh").read_text()


def test_parameter_server_roles_and_base_port(registry: Path, tmp_path: Path) -> None:
    out = tmp_path / "ps"
    assert export(out, "--strategy", "parameter_server", "--chief-on", "local",
                  "--on", "worker:0=h2", "--on", "worker-1=h3", "--ps-on", "h3,h2",
                  "--address", "local=10.0.0.1", "--address", "h3=10.0.0.3",
                  "--base-port", "30000") == 0
    plan = json.loads((out / "plan.json").read_text())
    assert (plan["workers"], plan["parameter_servers"]) == (2, 2)
    assert plan["cluster"] == {"chief": ["10.0.0.1:30000"],
                               "worker": ["10.0.0.2:30000", "10.0.0.3:30000"],
                               "ps": ["10.0.0.3:30001", "10.0.0.2:30001"]}
    machines = {tid: t["machine"] or "local" for tid, t in tasks_of(out).items()}
    assert machines == {"chief:0": "local", "worker:0": "h2", "worker:1": "h3",
                        "ps:0": "h3", "ps:1": "h2"}
    for stem, (kind, index) in {"chief-0": ("chief", 0), "worker-1": ("worker", 1),
                                "ps-1": ("ps", 1)}.items():
        assert tf_config(out, stem) == {"cluster": plan["cluster"],
                                        "task": {"type": kind, "index": index}}
    readme = (out / "README.md").read_text()
    assert "ssh alice@10.0.0.2 " in readme and "ssh -p 2222 bob@gpu3.lab.example " in readme
    assert "| h3 | 10.0.0.3 |" in readme  # the --address override, used in TF_CONFIG too


def test_single_task_on_a_remote_machine(registry: Path, tmp_path: Path) -> None:
    out = tmp_path / "one"
    assert export(out, "--strategy", "mirrored", "--on", "worker:0=h3",
                  "--python", "h3=/usr/bin/python3.11") == 0
    plan = json.loads((out / "plan.json").read_text())
    assert [(t["machine"], t["port"]) for t in plan["tasks"]] == [("h3", 0)]
    assert plan["cluster"] == {}
    assert "ssh -p 2222 bob@gpu3.lab.example" in (out / "README.md").read_text()


def test_this_machines_address_is_found_towards_the_others(
        registry: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    asked: list[str] = []
    def towards(host: str) -> str:
        asked.append(host)
        return "10.9.8.7"

    monkeypatch.setattr(placement, "local_address_towards", towards)
    out = tmp_path / "auto"
    assert export(out, "--strategy", "multi_worker_mirrored", "--workers-on", "local,h2") == 0
    assert asked == ["10.0.0.2"]
    assert tasks_of(out)["worker:0"]["host"] == "10.9.8.7"
    assert "reached at 10.9.8.7" in capsys.readouterr().err
    monkeypatch.setattr(placement, "local_address_towards", lambda host: "127.0.1.1")
    assert export(tmp_path / "lo", "--strategy", "multi_worker_mirrored",
                  "--workers-on", "local,h2") == 2
    assert "--address local=ADDR" in capsys.readouterr().err
    assert not (tmp_path / "lo").exists()


def test_real_local_address_lookup_sends_nothing_and_answers() -> None:
    assert placement.local_address_towards("10.0.0.2")


def test_base_port_alone_places_tasks_here(tmp_path: Path) -> None:
    out = tmp_path / "here"
    assert export(out, "--strategy", "multi_worker_mirrored", "--base-port", "40000") == 0
    assert [(t["host"], t["port"], t["machine"]) for t in tasks_of(out).values()] == [
        ("127.0.0.1", 40000, ""), ("127.0.0.1", 40001, "")]


def test_help_says_ports_are_not_checked(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["export", "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "ports are NOT checked" in text and "--workers-on" in text and "--base-port" in text


MWM = ("--strategy", "multi_worker_mirrored")


@pytest.mark.parametrize(("opts", "expected"), [
    ((*MWM, "--workers-on", "h2,h9"),
     "Unknown machine 'h9' (in --workers-on): registered machines are h2, h3, lo"),
    ((*MWM, "--on", "worker:5=h2"), "its tasks are worker:0, worker:1"),
    ((*MWM, "--on", "coordinator=h2"), "has no task 'coordinator'"),
    ((*MWM, "--on", "worker:0"), "is not KEY=VALUE"),
    ((*MWM, "--workers-on", "local,h2", "--address", "h2=127.0.0.1"),
     "--address h2=127.0.0.1 is a loopback address"),
    ((*MWM, "--workers-on", "h2,lo"), "Give --address lo=ADDR"),
    ((*MWM, "--workers-on", "h2,h3", "--base-port", "70000"), "--base-port 70000 is out of range"),
    ((*MWM, "--workers-on", "h2,h3", "--base-port", "80"), "need root"),
    ((*MWM, "--workers-on", "h2,h2", "--base-port", "65535"), "from 1024 to 65534"),
    ((*MWM, "--workers-on", "h2,h2;touch pwned"), "has spaces or shell characters"),
    ((*MWM, "--on", "worker:1=$(reboot)"), "has spaces or shell characters"),
    ((*MWM, "--workers-on", "h2,h3", "--python", "h2=python3;touch pwned"),
     "give the interpreter's plain path"),
    ((*MWM, "--workers-on", "h2,h3", "--python", "h2=~/venv/bin/python"), "no spaces, '~'"),
    ((*MWM, "--workers-on", "h2,h3", "--python", "lo=/usr/bin/python3"), "no task runs on lo"),
    ((*MWM, "--workers-on", "h2,h3", "--address", "h3=a b"), "not a host name or IP address"),
    ((*MWM, "--workers", "3", "--workers-on", "h2,h3"), "--workers 3 but --workers-on names 2"),
    ((*MWM, "--workers-on", "h2,h3", "--on", "worker:1=h2"), "Task worker:1 is placed twice"),
    ((*MWM, "--chief-on", "h2"), "--chief-on is only for --strategy parameter_server"),
    (("--strategy", "mirrored", "--workers-on", "h2,h3"), "runs one task (worker:0)"),
])
def test_bad_input_is_refused_with_what_to_do(
        registry: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        opts: tuple[str, ...], expected: str) -> None:
    out = tmp_path / "bundle"
    assert export(out, *opts) == 2
    captured = capsys.readouterr()
    assert expected in captured.err, captured.err
    assert captured.out == ""
    assert list(tmp_path.iterdir()) == [], "nothing is written, not even a staging directory"
    assert not Path("pwned").exists()


def test_every_problem_is_reported_at_once(registry: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert export(tmp_path / "b", *MWM, "--workers-on", "h2,h9", "--base-port", "1",
                  "--python", "h2=a b") == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("dtgui export: ") for line in err)


def test_no_registry_says_how_to_add_machines(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert export(tmp_path / "b", *MWM, "--workers-on", "local,h2") == 2
    err = capsys.readouterr().err
    assert "no machine is registered" in err and "Machines panel" in err


def test_a_registered_name_with_shell_characters_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = Path(os.environ["DTGUI_CONFIG_DIR"]) / "machines.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('schema = 1\n[[machines]]\nname = "gpu box"\nhost = "10.0.0.5"\n'
                    'user = "me"\n', encoding="utf-8")
    assert export(tmp_path / "b", *MWM, "--workers-on", "local,gpu box") == 2
    assert "rename the machine in the Machines panel" in capsys.readouterr().err


JUMP_REGISTRY = """\
schema = 1

[[machines]]
name = "gate"
host = "gate.example"
user = "ops"

[[machines]]
name = "inner"
host = "10.9.0.2"
user = "alice"
jump_host = "gate"

[[machines]]
name = "inner2"
host = "10.9.0.3"
user = "alice"
jump_host = "me@bastion.example:2200"
"""


def test_machines_behind_a_jump_host_get_ssh_dash_j_in_the_readme(tmp_path: Path) -> None:
    path = Path(os.environ["DTGUI_CONFIG_DIR"]) / "machines.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(JUMP_REGISTRY, encoding="utf-8")
    out = tmp_path / "j"
    assert export(out, "--strategy", "multi_worker_mirrored", "--replicas", "1",
                  "--workers-on", "inner,inner2") == 0
    plan = json.loads((out / "plan.json").read_text())
    assert plan["machines"]["inner"]["jump"] == "ops@gate.example:22"  # the registered gate
    assert plan["machines"]["inner2"]["jump"] == "me@bastion.example:2200"  # as given
    readme = (out / "README.md").read_text()
    assert "scp -J ops@gate.example:22 -r . alice@10.9.0.2:dtgui-cli-mh" in readme
    assert ("ssh -J ops@gate.example:22 alice@10.9.0.2 'cd dtgui-cli-mh && PYTHON=python3 "
            "bash run.sh inner'") in readme
    assert "ssh -J me@bastion.example:2200 alice@10.9.0.3 " in readme


def test_gpus_per_machine(registry: Path, tmp_path: Path,
                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "g"
    assert export(out, "--strategy", "multi_worker_mirrored", "--device", "gpu", "--replicas",
                  "2", "--workers-on", "h2,h3", "--gpus", "h2=0,1", "--gpus", "h3=2,3",
                  "--no-check") == 0
    tasks = tasks_of(out)
    assert [tasks["worker:0"]["gpus"], tasks["worker:1"]["gpus"]] == [[0, 1], [2, 3]]
    assert "export CUDA_VISIBLE_DEVICES=2,3\n" in (out / "tasks" / "worker-1.sh").read_text()
    capsys.readouterr()
    for opts, message in (
            (("--gpus", "h2=0"), "h2 has too few chosen GPUs for task worker:0 (needs 2)"),
            (("--gpus", "h2=0,x"), "give distinct GPU numbers"),
            (("--gpus", "h2=1,1"), "give distinct GPU numbers")):
        bad = tmp_path / f"bad{len(message)}"
        assert export(bad, "--strategy", "multi_worker_mirrored", "--device", "gpu",
                      "--replicas", "2", "--workers-on", "h2,h3", "--no-check", *opts) == 2
        assert message in capsys.readouterr().err and not bad.exists()
    cpu = tmp_path / "cpu"
    assert export(cpu, "--strategy", "multi_worker_mirrored", "--replicas", "1",
                  "--workers-on", "h2,h3", "--gpus", "h2=0") == 2
    assert "the plan trains on the CPU: add --device gpu" in capsys.readouterr().err
