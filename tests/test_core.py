"""Planning, validation, TF_CONFIG, bundle rendering, events and settings: no Qt, no TensorFlow."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes import recording_python

from dtgui.core import settings
from dtgui.core.bundles.bundle import Bundle, BundleError, primary_tasks, render_bundle
from dtgui.core.events import EventTail, parse_line
from dtgui.core.live_run import LiveRun
from dtgui.core.machines.hardware import GpuInfo, MachineFacts, TfView, explain, tf_view
from dtgui.core.plans.placement import (
    local_port_conflicts,
    place_local,
    placed_tf_config,
    task_layout,
)
from dtgui.core.plans.plan import DeviceKind, ModelFile, Plan, PlanError, validate
from dtgui.core.plans.strategies import STRATEGIES, Strategy, recommend
from dtgui.core.runs.records import RunRecord
from dtgui.core.runs.run_state import RunState
from dtgui.core.series import Series


def facts(gpus: int = 0, tf_gpus: int = 0, cores: int = 2, cuda: bool = True) -> MachineFacts:
    return MachineFacts(
        hostname="h", os_name="Linux", python="3.11", cpu_model="cpu", cpu_cores=cores,
        ram_total=2**34,
        gpus=[GpuInfo(i, "A100", 2**35, 0, 0.0, "550.1", "8.0") for i in range(gpus)],
        tf=TfView(version="2.21.0", gpus=tuple(f"/physical_device:GPU:{i}" for i in range(tf_gpus)),
                  built_with_cuda=cuda, cuda_version="12.5"),
    )


# -- strategies and validation ------------------------------------------------------------
def test_recommendation_follows_hardware() -> None:
    assert recommend(facts()).strategy == "mirrored"
    assert recommend(facts()).replicas == 2
    assert "logical CPU" in recommend(facts()).reason
    assert recommend(facts(1, 1)).strategy == "one_device"
    rec = recommend(facts(4, 4))
    assert (rec.strategy, rec.replicas) == ("mirrored", 4)
    assert "none usable by TensorFlow" in recommend(facts(2, 0)).reason


def test_explanations_say_what_to_do() -> None:
    assert "logical devices" in explain(facts())
    assert "tensorflow[and-cuda]" in explain(facts(2, 0, cuda=False))
    assert "cannot open them" in explain(facts(2, 0, cuda=True))
    assert "all 2 GPU" in explain(facts(2, 2))


def test_default_plan_is_valid_for_every_strategy() -> None:
    for key in STRATEGIES:
        one = key in ("one_device", "multi_worker_mirrored")
        plan = Plan(strategy=Strategy(key), replicas_per_task=1 if one else 2,
                    workers=2, parameter_servers=1, tpu_address="grpc://10.0.0.1:8470")
        assert validate(plan) == [], key


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"per_replica_batch": 0}, "Per-replica batch size must be between"),
        ({"steps": -3}, "Steps must be between"),
        ({"learning_rate": 0.0}, "Learning rate"),
        ({"replicas_per_task": "2"}, "whole number"),
        ({"strategy": "tpu", "tpu_address": " "}, "TPU needs an address"),
        ({"communication": "nccl"}, "NCCL communication needs GPUs"),
        ({"strategy": "one_device", "replicas_per_task": 2}, "exactly one replica"),
        ({"run_name": "x; touch pwned"}, "Run name"),
        ({"run_name": "$(reboot)"}, "Run name"),
        ({"strategy": "parameter_server", "parameter_servers": 0}, "Parameter servers"),
        ({"strategy": "nope"}, "Unknown strategy"),
        ({"model": ModelFile("")}, "model file"),
    ],
)
def test_invalid_plans_are_refused_with_the_reason(changes: dict[str, Any], fragment: str
                                                  ) -> None:
    problems = validate(Plan(**changes))
    assert any(fragment in p for p in problems), problems


def test_gpu_count_is_checked() -> None:
    plan = Plan(device_kind=DeviceKind.GPU, replicas_per_task=4)
    assert any("TensorFlow can use 2" in p for p in validate(plan, usable_gpus=2))
    assert validate(plan, usable_gpus=4) == []


def test_plan_round_trips_through_json() -> None:
    plan = place_local(Plan(strategy=Strategy.PARAMETER_SERVER, workers=2, parameter_servers=1))
    again = Plan.from_dict(json.loads(plan.to_json()))
    assert again == plan
    with pytest.raises(PlanError):
        Plan.from_dict({"schema": 99})


def test_plan_json_keeps_the_strategy_name_and_old_files_take_the_defaults() -> None:
    data = json.loads(Plan(strategy=Strategy.TPU, tpu_address="grpc://10.0.0.1:8470").to_json())
    assert data["strategy"] == "tpu"  # the name, as plan.json has always held it
    old = Plan.from_dict({"schema": 1, "strategy": "one_device", "steps": 7})
    assert old.strategy is Strategy.ONE_DEVICE and old.steps == 7
    assert old.steps_per_epoch == Plan().steps_per_epoch  # one set of defaults
    with pytest.raises(PlanError, match="'retired' is not a field"):  # a newer dtgui's file
        Plan.from_dict({"schema": 1, "strategy": "one_device", "retired": 1})
    with pytest.raises(PlanError, match="strategy is 'nope', which is not one of"):
        Plan.from_dict({"schema": 1, "strategy": "nope"})
    assert Plan(strategy="nope").strategy == "nope"  # type: ignore[arg-type]  # validate says


def test_the_strategy_catalogue_answers_for_every_strategy() -> None:
    assert list(STRATEGIES) == [s.value for s in Strategy]
    for strategy in Strategy:
        assert f"{strategy}" == strategy.value and strategy.title and strategy.summary
        assert strategy.tf_class.startswith("tf.distribute.")
        layout = task_layout(Plan(strategy=strategy, workers=2, parameter_servers=1))
        assert strategy.multi_process == (len(layout) > 1), strategy
        assert layout[0][0] == strategy.task_types[0]
    assert [s for s in Strategy if s.has_coordinator] == [Strategy.PARAMETER_SERVER]
    assert Strategy.named("nope") is None


def test_run_states_read_from_records() -> None:
    record = RunRecord.from_dict({"schema": 1, "run_id": "r", "run_name": "r", "bundle": "/b",
                                  "state": "finished"})
    assert record.state is RunState.FINISHED and record.state.ended and not record.is_active
    assert json.loads(json.dumps(record.to_dict()))["state"] == "finished"
    assert RunRecord(run_id="r", run_name="r", bundle="/b", state=RunState.RUNNING).is_active
    assert RunState.named("from-a-newer-dtgui") is RunState.UNKNOWN


def test_a_records_job_ids_are_kept_apart_from_its_process_ids() -> None:
    """A Slurm task's job id is its `job_id`, never a pid that a signal could reach; a
    record written before the field existed (the job id in `pid`) reads the same."""
    new = RunRecord(run_id="r", run_name="r", bundle="/b")
    new.set_started("worker:0", "local", pid=4242)
    new.set_started("worker:1", "cluster", job_id="918")
    assert new.pids() == {"worker:0": 4242} and new.job_ids() == {"worker:1": "918"}
    again = RunRecord.from_dict(json.loads(json.dumps(new.to_dict())))
    assert again.pids() == new.pids() and again.job_ids() == new.job_ids()
    old = RunRecord.from_dict({
        "schema": 1, "run_id": "r", "run_name": "r", "bundle": "/b",
        "machines": [{"name": "local", "dir": "/b"},
                     {"name": "cluster", "dir": "/s", "job_id": "918"}],
        "tasks": [{"task": "worker:0", "machine": "local", "pid": 4242},
                  {"task": "worker:1", "machine": "cluster", "pid": 918}]})
    assert old.pids() == {"worker:0": 4242} and old.job_ids() == {"worker:1": "918"}


# -- placement and TF_CONFIG -----------------------------------------------------------------
def test_single_task_strategies_have_no_tf_config() -> None:
    for key in (Strategy.ONE_DEVICE, Strategy.MIRRORED, Strategy.CENTRAL_STORAGE, Strategy.TPU):
        plan = place_local(Plan(strategy=key, replicas_per_task=1))
        assert [t.task_id for t in plan.tasks] == ["worker:0"]
        assert placed_tf_config(plan, plan.tasks[0]) is None


def test_multi_worker_tf_config() -> None:
    plan = place_local(Plan(strategy=Strategy.MULTI_WORKER_MIRRORED, workers=3, replicas_per_task=1))
    ports = {t.port for t in plan.tasks}
    assert len(ports) == 3 and 0 not in ports
    config = placed_tf_config(plan, plan.tasks[1])
    assert config == {"cluster": {"worker": [t.address for t in plan.tasks]},
                      "task": {"type": "worker", "index": 1}}
    assert all(a.startswith("127.0.0.1:") for a in config["cluster"]["worker"])
    assert plan.total_replicas == 3
    assert any("one replica per worker" in p for p in validate(plan.with_changes(replicas_per_task=2)))


def test_parameter_server_layout() -> None:
    plan = place_local(Plan(strategy=Strategy.PARAMETER_SERVER, workers=2, parameter_servers=1))
    assert [t.task_id for t in plan.tasks] == ["chief:0", "worker:0", "worker:1", "ps:0"]
    assert set(plan.cluster) == {"chief", "worker", "ps"}
    assert [t.task_id for t in primary_tasks(plan)] == ["chief:0"]
    assert task_layout(plan)[0] == ("chief", 0)


def test_busy_port_is_reported() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        plan = place_local(Plan(strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2), ports=[port, port + 0])
        problems = local_port_conflicts(plan)
    # one sentence for the wizard and the command line: no button of the GUI in it
    assert problems and f"Port {port}" in problems[0] and "choose other ports" in problems[0]
    assert "Re-plan" not in problems[0] and "press" not in problems[0].lower()


# -- bundle ------------------------------------------------------------------------------------
def test_bundle_layout_and_task_scripts(tmp_path: Path) -> None:
    plan = place_local(Plan(run_name="mw", strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2,
                                 replicas_per_task=1))
    bundle = render_bundle(plan, tmp_path / "b")
    for name in ("plan.json", "README.md", "requirements.txt", "run.sh",
                 "dtgui_worker/train.py", "data/digits.npz", "tasks/worker-0.sh",
                 "tasks/worker-1.sh"):
        assert (bundle.path / name).exists(), name
    assert not list(bundle.path.glob("dtgui_worker/__pycache__"))
    assert (bundle.path / "run.sh").stat().st_mode & stat.S_IXUSR
    assert "tensorflow==" in (bundle.path / "requirements.txt").read_text()
    subprocess.run(["bash", "-n", str(bundle.path / "run.sh")], check=True)
    assert Bundle.open(bundle.path).plan == bundle.plan

    fake = recording_python(tmp_path / "fake-python")
    dump = tmp_path / "dump"
    env = {**os.environ, "PYTHON": str(fake), "DUMP": str(dump)}
    subprocess.run(["sh", str(bundle.task_script(plan.tasks[1]))], cwd="/", env=env, check=True)
    assert json.loads((tmp_path / "dump.tfconfig").read_text()) == placed_tf_config(
        plan, plan.tasks[1])
    args = (tmp_path / "dump.args").read_text().split()
    assert args == ["-m", "dtgui_worker.train", "--plan", "plan.json", "--task", "worker:1",
                    "--out", "output"]
    assert (tmp_path / "dump.cuda").read_text() == "\n"  # a CPU plan hides GPUs


def test_hostile_model_path_never_reaches_a_script(tmp_path: Path) -> None:
    evil_dir = tmp_path / "a dir; touch pwned $(reboot) 'q'"
    evil_dir.mkdir()
    model = evil_dir / "m`id`.py"
    model.write_text("def build_model(): pass\ndef make_dataset(): pass\n")
    plan = place_local(Plan(model=ModelFile(str(model))))
    bundle = render_bundle(plan, tmp_path / "b")
    assert bundle.plan.model == ModelFile("project/m`id`.py", "project")
    assert (bundle.path / "project" / "m`id`.py").read_text() == model.read_text()
    scripts = "".join(p.read_text() for p in (bundle.path / "tasks").iterdir())
    assert "pwned" not in scripts and "reboot" not in scripts
    assert not (bundle.path / "data").exists()


def test_bundle_refuses_a_non_empty_destination_and_leaves_nothing_half_written(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    with pytest.raises(BundleError, match="not empty"):
        render_bundle(place_local(Plan()), dest)
    assert [p.name for p in dest.iterdir()] == ["keep.txt"]
    with pytest.raises(BundleError, match="does not exist"):
        render_bundle(place_local(Plan(model=ModelFile("/nope.py"))),
                      tmp_path / "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    with pytest.raises(PlanError):
        render_bundle(place_local(Plan(steps=0)), tmp_path / "y")


def test_open_rejects_a_directory_without_plan(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=r"no plan\.json"):
        Bundle.open(tmp_path)
    (tmp_path / "plan.json").write_text("{broken")
    with pytest.raises(BundleError, match="cannot be read"):
        Bundle.open(tmp_path)


# -- events and metrics ------------------------------------------------------------------------
def line(**fields: object) -> str:
    return json.dumps({"v": 1, "task": "worker:0", "t": 1.0, **fields}) + "\n"


def test_event_tail_reads_only_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    tail = EventTail(path)
    assert tail.read_new() == []
    first = line(kind="step", step=1, replica_losses=[1.0, 2.0])
    second = line(kind="step", step=2, replica_losses=[0.5, 0.7])
    path.write_text(first + second[:10])
    events = tail.read_new()
    assert [e.get("step") for e in events] == [1]
    with open(path, "a") as f:
        f.write(second[10:] + "not json\n" + json.dumps({"v": 3, "kind": "step"}) + "\n")
    assert [e.get("step") for e in tail.read_new()] == [2]
    resumed = EventTail(path, offset=len(first.encode()))
    assert [e.get("step") for e in resumed.read_new()] == [2]


def test_parse_line_rejects_unknown_kinds() -> None:
    assert parse_line(line(kind="bogus")) is None
    assert parse_line(b"\xff\xfe") is None
    said = parse_line(line(kind="log", message="hi"))
    assert said is not None and said.task == "worker:0"


def test_metrics_collect_replicas_throughput_devices_and_failures() -> None:
    metrics = LiveRun(total_steps=10)
    events = [e for e in map(parse_line, (
        line(kind="started", replicas=2, steps=10),
        line(kind="step", step=1, epoch=1, replica_losses=[2.0, 2.2], replica_ids=[0, 1],
             examples_per_sec=100.0),
        line(kind="step", step=2, epoch=1, replica_losses=[1.5, 1.6], replica_ids=[0, 1],
             examples_per_sec=120.0),
        line(kind="device", t=3.0, devices=[{"kind": "cpu", "index": 0, "util": 50.0,
                                              "mem_used": 2**20, "mem_total": 2**30}]),
        line(kind="failed", task="worker:1", error="boom"),
    )) if e is not None]
    assert len(events) == 5
    metrics.add_events(events)
    snap = metrics.snapshot()
    assert snap.step == 2 and snap.total_steps == 10
    xs, ys = snap.replica_loss[1]
    assert list(xs) == [1, 2] and list(ys) == [2.2, 1.6]
    assert list(snap.throughput["worker:0"][1]) == [100.0, 120.0]
    assert list(snap.device_util["worker:0 cpu0"][1]) == [50.0]
    assert list(snap.device_mem["worker:0 cpu0"][1]) == [1.0]
    assert snap.tasks["worker:1"].status == "failed" and snap.tasks["worker:1"].error == "boom"
    version = metrics.version
    metrics.add_events([])
    assert metrics.version == version


def test_a_cpu_run_s_logs_leave_out_tensorflow_s_search_for_cuda() -> None:
    printed = [  # what TensorFlow 2.21 prints at start on a machine without CUDA
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
        "I0000 00:00:1795709829.923230   30416 cudart_stub.cc:31] Could not find cuda drivers "
        "on your machine, GPU will not be used.",
        "E0000 00:00:1795709838.664473   30416 cuda_platform.cc:52] failed call to cuInit: "
        "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
        "step 1/10 loss 2.3"]
    cpu, gpu = LiveRun(cpu_only=True), LiveRun()
    for metrics in (cpu, gpu):
        metrics.add_log_lines("worker:0", printed)
    assert cpu.log_lines("worker:0") == ["step 1/10 loss 2.3"]
    assert gpu.log_lines("worker:0") == printed  # on a GPU plan it says why none is used


def test_a_parameter_server_coordinator_s_release_errors_are_folded_and_counted() -> None:
    gap = ("E0000 00:00:1795940515.181532   23757 function_handle_cache.cc:31] Failed to clear "
           "function handle cache: UNIMPLEMENTED: Releasing a multi-device component handle on "
           "a remote device is not yet implemented.")
    error = ("E0000 00:00:1795940515.2   23757 coordinator.cc:9] Failed to clear function "
             "handle cache: another error")
    metrics = LiveRun()
    metrics.add_log_lines("chief:0", [gap, "step 25/6000", gap, error])
    assert metrics.log_lines("chief:0") == ["step 25/6000", error]
    assert metrics.log_folded("chief:0") == 2


def test_series_grows_without_losing_points() -> None:
    series = Series(capacity=2)
    for i in range(1000):
        series.append(i, i * 2)
    xs, ys = series.view()
    assert len(xs) == 1000 and np.array_equal(ys, np.arange(1000) * 2)


# -- settings ----------------------------------------------------------------------------------
def test_last_plan_is_remembered_and_a_corrupt_file_is_kept_aside() -> None:
    assert settings.load_last_plan() == (None, "")
    plan = Plan(strategy=Strategy.CENTRAL_STORAGE, seed=7)
    settings.save_last_plan(plan)
    assert settings.load_last_plan() == (plan, "")
    path = settings.last_plan_file()
    path.write_text("{ not json")
    loaded, message = settings.load_last_plan()
    assert loaded is None and "damaged" in message
    backups = list(path.parent.glob("last-run.json.corrupt-*"))
    assert len(backups) == 1 and backups[0].read_text() == "{ not json"
    assert not path.exists()


def test_tf_view() -> None:
    view = tf_view({"tensorflow": "2.21.0", "physical_devices": [
        {"name": "/physical_device:CPU:0", "device_type": "CPU"},
        {"name": "/physical_device:GPU:0", "device_type": "GPU"}]})
    assert view.version == "2.21.0" and view.gpus == ("/physical_device:GPU:0",)
    assert tf_view({"error": "Cannot import tensorflow"}).error == "Cannot import tensorflow"
