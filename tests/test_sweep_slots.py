"""Where a sweep's trials run, as pure decisions: free GPU groups across this machine and
registered machines from real H100 captures (tests/fixtures/gpu: idle, and under load), a GPU
with a compute process left to it, more trials at once than free GPUs said. (The queue holding
a trial back while its slot's GPU is taken: tests/test_sweep_spec.py, the failing trial.)"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QCheckBox

from dtgui.core.machines.hardware import GpuInfo
from dtgui.core.machines.registry import Machine, MachineRegistry
from dtgui.core.plans.plan import DeviceKind, Plan, TaskSpec
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.records import RunRecord
from dtgui.core.runs.run_state import RunState
from dtgui.core.sweeps.sweep import SweepError
from dtgui.launch.gpus.free_slots import (
    ALL_GPUS,
    GpuProber,
    GpuReport,
    Slot,
    active_run_plans,
    free_groups,
    held_gpus,
    slots_for,
)
from dtgui.launch.targets import Target
from dtgui.remote.probe import parse_gpu_csv, processes_by_index

FIXTURES = Path(__file__).parent / "fixtures" / "gpu"
IDLE_H100 = parse_gpu_csv([(FIXTURES / "nvidia-smi-query-h100.csv").read_text().strip()])[0]
# A matrix product in a loop: 1.8% of the memory, 63..98% busy (the worker's telemetry).
LOADED_H100 = [GpuInfo(d["index"], d["name"], d["mem_total"], d["mem_used"], d["util"])
               for line in (FIXTURES / "telemetry-h100-under-load.jsonl").read_text().splitlines()
               for d in json.loads(line)["devices"]]
ONE_GPU = Plan(device_kind=DeviceKind.GPU, strategy=Strategy.ONE_DEVICE, replicas_per_task=1)


def h100(index: int, loaded: bool = False) -> GpuInfo:
    return dataclasses.replace(LOADED_H100[0] if loaded else IDLE_H100, index=index)


def test_an_h100_under_load_is_busy_though_its_memory_is_nearly_free() -> None:
    assert IDLE_H100.mem_total == 81559 << 20 and GpuReport([IDLE_H100]).idle() == [0]
    for sample in LOADED_H100:
        assert sample.mem_used / sample.mem_total < 0.02
        assert GpuReport([sample]).idle() == []
    # idle by its figures, but a compute process runs there (nvidia-smi's process list)
    assert GpuReport([h100(0), h100(1)], with_processes={1}).idle() == [0]


def test_compute_processes_are_matched_to_their_gpu_by_uuid() -> None:
    gpus = ["0, GPU-aaaa", "1, GPU-bbbb", "2, GPU-cccc"]
    apps = ["GPU-cccc, 4242", "GPU-aaaa, 17", "GPU-cccc, 4243"]
    assert processes_by_index(gpus, apps) == [1, 0, 2]
    assert processes_by_index(["0, GPU-aaaa"], []) == [0]
    # the machine probe's count is enough for a GPU to be taken
    assert GpuReport([h100(0), dataclasses.replace(h100(1), processes=1)]).idle() == [0]


def test_trials_take_free_gpus_across_machines_and_say_what_is_left_out(
        tmp_path: Path) -> None:
    registry = MachineRegistry(tmp_path / "machines.toml")
    for name in ("h100a", "h100b"):
        registry.add(Machine(name=name, host=f"{name}.lan", user="me", python="/opt/py"))
    reports = {
        "local": GpuReport([h100(0), h100(1)]),
        "h100a": GpuReport([h100(0, loaded=True), h100(1), h100(2)], with_processes={2}),
        "h100b": GpuReport(error="Connection refused"),
    }
    asked: list[Sequence[str]] = []

    def report(names: Sequence[str]) -> dict[str, GpuReport]:
        asked.append(names)
        return {n: reports[n] for n in names}

    assert free_groups(reports, 1) == [("local", (0,)), ("h100a", (1,)), ("local", (1,))]
    notes: list[str] = []
    slots = slots_for(ONE_GPU, 4, notes, machines=["local", "h100a", "h100b", "h100a"],
                      reports=report, registry=registry)
    assert asked == [["local", "h100a", "h100b"]]  # each machine asked once
    assert [s.name for s in slots] == ["local gpu 0", "h100a gpu 1", "local gpu 1"]
    assert [(s.targets[0].name, s.gpus, s.targets[0].python) for s in slots] == [
        ("local", (0,), ""), ("h100a", (1,), "/opt/py"), ("local", (1,), "")]
    assert slots[1].targets[0].machine is not None
    said = "\n".join(notes)
    assert "h100b: its GPUs cannot be read (Connection refused)" in said
    assert "h100a: GPU 2 run(s) another process" in said
    assert "4 trials at once were asked, but 3 group(s) of 1 free GPU(s)" in said

    mirrored = Plan(device_kind=DeviceKind.GPU, strategy=Strategy.MIRRORED, replicas_per_task=2)
    pairs = slots_for(mirrored, 4, [], machines=["local", "h100a"], reports=report,
                      registry=registry)
    assert [(s.targets[0].name, s.gpus) for s in pairs] == [("local", (0, 1))]
    with pytest.raises(SweepError, match="No GPU of h100a is free"):
        slots_for(mirrored, 1, [], machines=["h100a"], reports=report, registry=registry)
    cpu = slots_for(Plan(), 2, [], machines=["local", "h100a"], registry=registry)
    assert [s.name for s in cpu] == ["local #1", "h100a #2"]  # a CPU trial a machine
    asked.clear()
    every = slots_for(ONE_GPU, 8, [], machines=["all"], reports=report, registry=registry)
    assert asked == [["local", "h100a", "h100b"]] and len(every) == 3



def test_gpus_given_to_a_single_run_that_still_runs_are_left_to_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run launched while the sweep runs holds its GPUs from its start (its record and
    placed plan), before its process shows on them; one given no GPU numbers holds them all."""
    single = Plan(device_kind=DeviceKind.GPU, strategy=Strategy.ONE_DEVICE, replicas_per_task=1,
                  tasks=(TaskSpec("worker", 0, gpus=(1,)),))
    remote = Plan(device_kind=DeviceKind.GPU, strategy=Strategy.ONE_DEVICE, replicas_per_task=1,
                  tasks=(TaskSpec("worker", 0, machine="h100a"),))
    assert held_gpus([single, remote, Plan()]) == {"local": {1}, "h100a": {ALL_GPUS}}
    bundle = tmp_path / "run-1"
    bundle.mkdir()
    (bundle / "plan.json").write_text(json.dumps(single.to_dict()))
    record = RunRecord(run_id="run-1", run_name="r", bundle=str(bundle), state=RunState.RUNNING)
    assert active_run_plans([record]) == [single]

    prober = GpuProber(runs=lambda: [single, remote])
    monkeypatch.setattr(prober, "_ask", lambda name: GpuReport([h100(0), h100(1)]))
    assert prober.report("local").idle() == [0]
    assert prober.report("h100a").idle() == []
    assert "GPU 1 is in use" in prober.busy(Slot("local gpu 1", (Target(gpus=(1,)),)))
    assert prober.busy(Slot("local gpu 0", (Target(gpus=(0,)),))) == ""
    monkeypatch.setattr(prober, "_ask", lambda name: GpuReport(error="Connection refused"))
    assert prober.busy(Slot("h100a gpu 0", (Target("h100a", gpus=(0,)),))) == (
        "its machine's GPUs cannot be read (Connection refused)")


def test_a_sweep_set_up_to_run_a_trial_a_machine_keeps_its_machines(tmp_path: Path) -> None:
    """The dialog's machines (spec.trial_on) are the queue's slots, also when the sweep's
    process reads them back from its folder."""
    from dtgui.core.sweeps.sweep import SweepSpec, load_sweep, parse_param
    from dtgui.launch.sweeps.sweep_queue import SweepQueue

    spec = SweepSpec(params=(parse_param("lr=choice:0.01,0.02"),), trials=2, parallel=3,
                     trial_on=("local", "local"))
    queue = SweepQueue.new(tmp_path / "s", spec, Plan())
    assert [s.name for s in queue.slots or ()] == ["local #1", "local #2"]
    assert load_sweep(tmp_path / "s")[0].trial_on == ("local", "local")


def test_this_machines_gpus_are_read_through_the_probe_and_nvidia_smi(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real reading path without a GPU: the machine probe and the process list ask an
    nvidia-smi that answers as two H100s would, one of them running a compute process."""
    row = (FIXTURES / "nvidia-smi-query-h100.csv").read_text().strip()
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f"""#!/bin/sh
case "$*" in
  *--query-gpu=index,uuid*) printf '0, GPU-aaaa\\n1, GPU-bbbb\\n' ;;
  *--query-compute-apps*) printf 'GPU-bbbb, 4242\\n' ;;
  *compute_cap*) printf '{row}, 9.0\\n{row}, 9.0\\n' ;;
  *--query-gpu*) printf '{row}\\n{row}\\n' ;;
  *) printf 'NVIDIA-SMI 580.159.04  Driver Version: 580.159.04  CUDA Version: 13.0\\n' ;;
esac
""")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:{os.environ['PATH']}")
    report = GpuProber(runs=list).report("local")
    assert [g.name for g in report.gpus] == ["NVIDIA H100 80GB HBM3"] * 2, report
    assert report.with_processes == {1} and report.idle() == [0]
    notes: list[str] = []
    slots = slots_for(ONE_GPU, 2, notes)  # this machine's GPUs, read as above
    assert [s.name for s in slots] == ["gpu 0"]
    assert "2 trials at once were asked, but 1 group(s) of 1 free GPU(s)" in notes[0]


def test_a_sweeps_trials_hold_their_gpus_for_single_runs_and_other_sweeps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qtbot: object,
        stub_python: Callable[..., str]) -> None:
    """While a trial runs on a GPU slot, the sweeps' register says so: another sweep's prober
    counts the GPU as in use, and the wizard's GPU picker shows it busy ("trial 0 of sweep
    gpu-sweep"), unchecked and not offered, so a run launched now takes only what is free.
    When the sweep ends, it holds nothing."""
    from pytestqt.qtbot import QtBot

    from dtgui.core.sweeps.sweep import SweepSpec, parse_param
    from dtgui.launch.gpus.holds import Hold, HoldRegister, busy_gpus, holds_dir, read_holds
    from dtgui.launch.start.pipeline import launch_plan
    from dtgui.launch.sweeps.sweep_queue import SweepQueue
    from dtgui.ui.wizard.gpu_picker import GpuPicker

    assert isinstance(qtbot, QtBot)
    # the register, pure: a sweep's own file, its holds gone when the trial ends; a killed
    # sweep's file holds nothing
    register = HoldRegister("lr-search", tmp_path, pid=os.getpid())
    register.hold(4, "local", (0, 1))
    register.hold(5, "h100a", (2,))
    assert busy_gpus(read_holds(tmp_path)) == {"local": {0: "trial 4 of sweep lr-search",
                                                         1: "trial 4 of sweep lr-search"},
                                               "h100a": {2: "trial 5 of sweep lr-search"}}
    assert read_holds(tmp_path, but_pid=os.getpid()) == []  # a sweep's own are not others'
    register.release(4)
    assert read_holds(tmp_path) == [Hold("h100a", 2, 5, "lr-search")]
    queued = HoldRegister("big", tmp_path, pid=os.getppid())  # the run queue starting a run
    queued.hold(0, "local", (3,), run="big")
    assert busy_gpus(read_holds(tmp_path))["local"] == {3: "run big"}
    queued.close()
    (tmp_path / "999999999.json").write_text(json.dumps(
        [{"machine": "local", "gpu": 3, "trial": 1, "sweep": "killed"}]))
    assert read_holds(tmp_path) == [Hold("h100a", 2, 5, "lr-search")]
    register.close()
    assert read_holds(tmp_path) == []

    # another sweep's prober: a GPU this sweep's trial holds is in use
    other = HoldRegister("lr-search", tmp_path, pid=os.getpid())
    other.hold(4, "local", (1,))
    prober = GpuProber(runs=list, sweeps=lambda: read_holds(tmp_path))
    monkeypatch.setattr(prober, "_ask", lambda name: GpuReport([h100(0), h100(1)]))
    assert prober.report("local").idle() == [0]
    assert "GPU 1 is in use" in prober.busy(Slot("local gpu 1", (Target(gpus=(1,)),)))
    other.close()

    # the GPU picker reads the register off the UI thread: held GPUs shown busy, not chosen
    def box(name: str) -> QCheckBox:
        found = picker.findChildren(QCheckBox, name)  # an earlier row's: deleted by the loop
        assert len(found) == 1
        return found[0]

    held = HoldRegister("lr-search")  # in the data directory, where sweeps keep theirs
    held.hold(4, "local", (1,))
    picker = GpuPicker()
    qtbot.addWidget(picker)
    picker.set_facts({"local": [h100(0), h100(1)]})
    picker.show_machines(["local"])
    qtbot.waitUntil(lambda: not box("gpu:local:1").isEnabled(), timeout=5000)
    assert not box("gpu:local:1").isChecked() and box("gpu:local:0").isChecked()
    assert box("gpu:local:1").text().endswith("— busy: trial 4 of sweep lr-search")
    assert picker.busy("local") == {1: "trial 4 of sweep lr-search"}
    assert picker.chosen() == {"local": [0]}
    def rendered() -> bool:  # the rows before deleted (deleteLater)
        return len(picker.findChildren(QCheckBox, "gpu:local:1")) == 1

    picker.set_wait_for_busy(True)  # "Launch when free": the run may wait for it
    qtbot.waitUntil(rendered, timeout=5000)
    assert box("gpu:local:1").isEnabled() and box("gpu:local:1").text().endswith("the run waits")
    box("gpu:local:1").setChecked(True)
    assert picker.chosen() == {"local": [0, 1]}
    picker.set_wait_for_busy(False)
    qtbot.waitUntil(rendered, timeout=5000)
    assert not box("gpu:local:1").isEnabled() and picker.chosen() == {"local": [0]}
    held.close()  # the trial ended: offered (checked) again once read again
    picker.refresh_busy()
    qtbot.waitUntil(lambda: box("gpu:local:1").isEnabled(), timeout=5000)
    assert box("gpu:local:1").isChecked() and picker.chosen() == {"local": [0, 1]}

    # a real queue: its trial on GPU 1 is in the register while it runs; the picker reads it
    python = stub_python(step_seconds=0.2)
    plan = Plan(run_name="gpu-sweep", strategy=Strategy.ONE_DEVICE, replicas_per_task=1,
                steps=15, checkpoint_every=0)
    spec = SweepSpec(params=(parse_param("lr=choice:0.01"),), trials=1, parallel=1,
                     search="random", objective="loss", pruner="none")
    seen: list[dict[str, dict[int, str]]] = []

    def launch(trial_plan: Plan, root: Path, **kwargs: Any) -> Any:
        controller = launch_plan(trial_plan, root, **{**kwargs,
                                                      "targets": [Target(python=python)]})
        return controller

    def on_note(_note: str) -> None:
        pass

    queue = SweepQueue.new(tmp_path / "s", spec, plan, launch=launch, busy=lambda _s: "",
                           slots=[Slot("gpu 1", (Target(gpus=(1,)),))], on_note=on_note)
    original = queue._follow

    def follow(run: Any) -> None:
        if not seen:
            seen.append(busy_gpus(read_holds()))
        original(run)

    monkeypatch.setattr(queue, "_follow", follow)
    rows = queue.run()
    assert [r.state for r in rows] == ["finished"]
    assert seen == [{"local": {1: "trial 0 of sweep gpu-sweep"}}]
    assert read_holds() == [] and not any(holds_dir().glob("*.json"))
