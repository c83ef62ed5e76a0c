"""Remote GPUs as the probe reads them, and what dtgui says when TensorFlow cannot use them.

The outputs are real ones captured on an NVIDIA H100 machine (tests/fixtures/gpu/README.md),
read into the machine probe's answers. The machine probe itself runs here as it runs on any
machine (its source on stdin of the interpreter), with this machine's Python and a stand-in
`nvidia-smi` on PATH that replays those captures (there is no GPU here): one that knows the
`compute_cap` field, and one that refuses it as drivers before it did.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakes import H100_COMPUTE_CAP, H100_PROBE, H100_ROW, fake_nvidia_smi

from dtgui.core.machines.doctor import FAIL, OK, WARN, Check, build_checks
from dtgui.core.machines.hardware import MachineFacts, TfView, tf_install_command
from dtgui.core.machines.registry import RemoteFacts
from dtgui.remote.commands import LocalRunner
from dtgui.remote.probe import ProbeAnswer, parse_gpu_csv, probe, read_probe

H100_PYTHON = "/opt/torch/.venv/bin/python3"
NO_TENSORFLOW = ProbeAnswer({"tensorflow": {
    "tensorflow": None, "not_installed": True,
    "error": "ModuleNotFoundError: No module named 'tensorflow'"}})


def capture_sections(text: str) -> dict[str, list[str]]:
    """The capture's `@@name` sections."""
    sections: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith("@@"):
            current = sections.setdefault(line[2:].strip(), [])
        else:
            current.append(line.rstrip())
    return sections


def h100_answer(with_python: bool = True) -> ProbeAnswer:
    """The H100 machine's capture as the machine probe answers `facts --system --gpus`."""
    s = capture_sections(H100_PROBE)
    uname = s["uname"]
    data: dict[str, Any] = {
        "system": {"hostname": s["hostname"][0], "os_name": s["os_release"][0],
                   "kernel": f"{uname[0]} {uname[1]}", "arch": uname[2],
                   "cpu_cores": int(s["nproc"][0]), "cpu_model": s["cpu"][0].strip(),
                   "ram_total": int(s["mem"][0].split()[1]) * 1024},
        "gpus": {"source": "nvidia-smi", "compute_cap": False, "rc": "0",
                 "rows": [r for r in s["gpus"] if not r.startswith("rc=")],
                 "header": s["smi"]}}
    if with_python:
        data.update(executable=s["python"][0], python=s["python"][1])
    return ProbeAnswer(data)


def tensorflow_answer(version: str, cuda: bool, gpus: int = 0) -> ProbeAnswer:
    devices = [{"name": f"/physical_device:GPU:{i}", "device_type": "GPU"} for i in range(gpus)]
    return ProbeAnswer({"tensorflow": {"tensorflow": version, "built_with_cuda": cuda,
                                       "physical_devices": devices, "error": None}})


def local(tf: str = "2.21.0") -> MachineFacts:
    return MachineFacts(hostname="here", os_name="Linux", python="3.11.7", cpu_model="cpu",
                        cpu_cores=8, ram_total=8 << 30, tf=TfView(version=tf))


def row(checks: list[Check], machine: str, topic: str) -> Check:
    found = [c for c in checks if c.machine == machine and c.topic.startswith(topic)]
    assert len(found) == 1, (machine, topic, checks)
    return found[0]


# -- parsing the captures -------------------------------------------------------------------------
def test_the_h100_query_row_parses_with_and_without_compute_capability() -> None:
    (gpu,) = parse_gpu_csv([H100_ROW])
    assert (gpu.name, gpu.mem_total, gpu.mem_used, gpu.util, gpu.driver) == (
        "NVIDIA H100 80GB HBM3", 81559 * 2**20, 0, 0.0, "580.159.04")
    assert gpu.compute_capability == ""
    (gpu,) = parse_gpu_csv([f"{H100_ROW}, {H100_COMPUTE_CAP}"], with_compute_cap=True)
    assert (gpu.name, gpu.driver, gpu.compute_capability) == (
        "NVIDIA H100 80GB HBM3", "580.159.04", "9.0")
    assert gpu.mem_total == 81559 * 2**20
    (odd,) = parse_gpu_csv(["Foo, Bar GPU, 1024, 10, 5, 550.54, [N/A]"], with_compute_cap=True)
    assert (odd.name, odd.driver, odd.compute_capability) == ("Foo, Bar GPU", "550.54", "")


def test_the_h100_probe_without_tensorflow_says_install_the_cuda_build() -> None:
    facts = read_probe(H100_PYTHON, h100_answer(), NO_TENSORFLOW)
    assert (facts.python_command, facts.python_path, facts.python_version) == (
        H100_PYTHON, H100_PYTHON, "3.12.3")
    assert facts.tf_version == "not installed" and not facts.tf_installed
    assert (facts.hostname, facts.os_name, facts.cpu_cores) == ("vm", "Ubuntu 24.04.3 LTS", 16)
    assert [g.name for g in facts.gpus] == ["NVIDIA H100 80GB HBM3"]
    assert (facts.driver, facts.cuda_version) == ("580.159.04", "13.0")
    assert facts.warnings == []

    explanation = facts.as_machine_facts().explanation()
    assert "sees 1 GPU(s)" in explanation
    assert "pip install 'tensorflow[and-cuda]'" in explanation

    checks = build_checks(local("2.21.0"), {"h100": facts}, 23456)
    tf = row(checks, "h100", "TensorFlow")
    assert tf.status == FAIL
    assert tf.fix == f"pip install 'tensorflow[and-cuda]==2.21.0' on h100 (for {H100_PYTHON})"
    gpus = row(checks, "h100", "GPUs")
    assert gpus.status == OK and "1 × NVIDIA H100 80GB HBM3; driver 580.159.04, CUDA 13.0" \
        in gpus.detail


def test_a_cpu_build_of_tensorflow_beside_gpus_is_a_warning_with_the_cuda_build_as_fix() -> None:
    facts = read_probe(H100_PYTHON, h100_answer(), tensorflow_answer("2.21.0", cuda=False))
    assert (facts.tf_version, facts.tf_built_with_cuda, facts.tf_gpus) == ("2.21.0", False, [])
    assert "built without CUDA" in facts.as_machine_facts().explanation()
    assert "'tensorflow[and-cuda]==2.21.0'" in facts.as_machine_facts().explanation()
    checks = build_checks(local("2.21.0"), {"h100": facts}, 23456)
    assert row(checks, "h100", "TensorFlow").status == OK
    gpus = row(checks, "h100", "GPUs")
    assert gpus.status == WARN and "CPU build" in gpus.detail
    assert gpus.fix.startswith("pip install 'tensorflow[and-cuda]==2.21.0' on h100")

    seen = read_probe(H100_PYTHON, h100_answer(), tensorflow_answer("2.21.0", cuda=True, gpus=1))
    assert seen.tf_gpus == ["/physical_device:GPU:0"]
    assert row(build_checks(local(), {"h100": seen}, 1), "h100", "GPUs").status == OK
    assert "can use all 1 GPU" in seen.as_machine_facts().explanation()


def test_install_commands() -> None:
    assert tf_install_command() == "pip install tensorflow"
    assert tf_install_command("2.21.0") == "pip install tensorflow==2.21.0"
    assert tf_install_command("2.21.0", gpus=True) == "pip install 'tensorflow[and-cuda]==2.21.0'"


def test_a_registered_python_that_is_missing_is_named_in_the_rows() -> None:
    # The registered interpreter is not there: the machine's python3 still tells the system.
    facts = read_probe("/opt/conda/envs/tf/bin/python", ProbeAnswer(None, 127, "not found"),
                       system=h100_answer(with_python=False))
    assert facts.python_path == "" and facts.tf_error == "no /opt/conda/envs/tf/bin/python"
    assert facts.warnings == ["The Python interpreter '/opt/conda/envs/tf/bin/python' was "
                              "not found there."]
    assert [g.name for g in facts.gpus] == ["NVIDIA H100 80GB HBM3"]
    checks = build_checks(local(), {"h100": facts}, 1)
    py = row(checks, "h100", "Python")
    assert py.status == FAIL and "/opt/conda/envs/tf/bin/python" in py.detail
    assert "Python field" in py.fix
    assert "there is no /opt/conda/envs/tf/bin/python" in row(checks, "h100", "TensorFlow").detail


# -- the machine probe itself, with a stand-in nvidia-smi -----------------------------------------
def _run_probe_here(python: str, bin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> RemoteFacts:
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return probe(LocalRunner(), python)


@pytest.mark.slow
def test_the_probe_asks_for_compute_capability_and_falls_back_for_old_drivers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    new, old = tmp_path / "new", tmp_path / "old"
    for d, knows in ((new, True), (old, False)):
        d.mkdir()
        fake_nvidia_smi(d, knows)
    facts = _run_probe_here(sys.executable, new, monkeypatch)
    assert [(g.name, g.compute_capability, g.driver) for g in facts.gpus] == [
        ("NVIDIA H100 80GB HBM3", "9.0", "580.159.04")]
    assert facts.cuda_version == "13.0" and facts.gpu_error == ""
    # This machine's TensorFlow (a CUDA build without the CUDA libraries) opens no GPU.
    import importlib.metadata

    assert facts.tf_version == importlib.metadata.version("tensorflow")
    assert facts.tf_built_with_cuda is not None and facts.tf_gpus == []
    assert "tensorflow[and-cuda]" in facts.as_machine_facts().explanation()
    gpus = row(build_checks(local(facts.tf_version), {"box": facts}, 1), "box", "GPUs")
    assert gpus.status == WARN and "'tensorflow[and-cuda]" in gpus.fix

    facts = _run_probe_here(sys.executable, old, monkeypatch)
    assert [(g.name, g.compute_capability, g.mem_total) for g in facts.gpus] == [
        ("NVIDIA H100 80GB HBM3", "", 81559 * 2**20)]
    assert facts.gpu_error == ""


def test_a_python_without_tensorflow_beside_a_gpu_gets_the_cuda_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")],
                   check=True, timeout=120)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_nvidia_smi(bin_dir, True)
    python = str(tmp_path / "venv" / "bin" / "python")
    facts = _run_probe_here(python, bin_dir, monkeypatch)
    assert facts.python_path == python and facts.tf_version == "not installed"
    assert "pip install 'tensorflow[and-cuda]'" in facts.as_machine_facts().explanation()
    tf = row(build_checks(local("2.21.0"), {"box": facts}, 1), "box", "TensorFlow")
    assert tf.fix == f"pip install 'tensorflow[and-cuda]==2.21.0' on box (for {python})"
