"""The worker (dtgui/worker) trains for real: every strategy, in subprocesses, on 2 cores.

Plans are written by hand into a temp bundle; the program runs as
``python -m dtgui.worker.train --plan plan.json --task T --out output`` and we read its
events (docs/bundle-format.md).
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes import wait_for
from worker_helpers import (
    GOOD_MODEL,
    LABELS_TOO_BIG,
    MISSING_FUNCTION,
    RAISING_MODEL,
    SYNTAX_ERROR,
    assert_trained,
    copy_worker_package,
    finish,
    free_ports,
    json_result,
    kinds,
    log_text,
    make_bundle,
    make_plan,
    read_events,
    run_task,
    start_module,
    start_task,
    step_losses,
    step_means,
    stop,
    stop_server,
)

from dtgui.core.measure.bottleneck import COMMUNICATION, COMPUTE, INPUT, StepSplit, verdict
from dtgui.core.measure.profile_answers import captured, capturing_steps
from dtgui.worker.model_check_result import read_result
from dtgui.worker.profile_request import PROFILE_SIGNAL, REQUEST_NAME
from dtgui.worker.step_timing import BUDGET_VARIABLE
from dtgui.worker.stop_request import STOP_GRACE_SECONDS

pytestmark = pytest.mark.slow


def tensorboard_scalars(logdir: Path) -> dict[str, dict[int, float]]:
    """tag -> step -> value, read back by TensorFlow's own event-file reader."""
    code = (
        "import json, sys, tensorflow as tf\n"
        "found = {}\n"
        "for path in tf.io.gfile.glob(sys.argv[1] + '/events.out.tfevents.*'):\n"
        "    for e in tf.compat.v1.train.summary_iterator(path):\n"
        "        for v in e.summary.value:\n"
        "            found.setdefault(v.tag, {})[e.step] = v.simple_value\n"
        "print(json.dumps(found))\n")
    out = subprocess.run([sys.executable, "-c", code, str(logdir)], capture_output=True,
                         text=True, check=True, timeout=120).stdout
    return {tag: {int(s): v for s, v in values.items()}
            for tag, values in json.loads(out.strip().splitlines()[-1]).items()}


def xprof_op_rows(traces: list[Path]) -> list[int]:
    """The TensorFlow ops XProf's converter finds in each trace (its op statistics tool), read
    in a process of its own as TensorBoard's Profile tab reads them."""
    code = (
        "import json, sys\n"
        "from xprof.convert import raw_to_tool_data as r\n"
        "rows = []\n"
        "for path in sys.argv[1:]:\n"
        "    data, _ = r.xspace_to_tool_data([path], 'framework_op_stats', {})\n"
        "    tables = json.loads(data.decode() if isinstance(data, bytes) else data)\n"
        "    rows.append(len(tables[0]['rows']))\n"
        "print(json.dumps(rows))\n")
    out = subprocess.run([sys.executable, "-c", code, *map(str, traces)], capture_output=True,
                         text=True, check=True, timeout=120).stdout
    return [int(n) for n in json.loads(out.strip().splitlines()[-1])]


def test_one_device_with_xla_trains_through_xla(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, make_plan(strategy="one_device", xla=True, steps=4,
                                             steps_per_epoch=2, log_every=1))
    proc = start_task(bundle, "worker:0", tf_log_level="0")
    code, events = finish(proc, bundle)
    log = log_text(bundle, "worker:0")
    started = assert_trained(code, events, steps=4, replicas=1, log=log)
    assert started["strategy"] == "one_device" and started["global_batch"] == 16
    assert started["resumed_from_step"] == 0
    assert set(started["versions"]) == {"python", "tensorflow", "keras"}
    messages = [e["message"] for e in kinds(events, "log")]
    assert any(m.startswith("XLA: the replica step is compiled by XLA") for m in messages)
    assert "Compiled cluster using XLA" in log  # TensorFlow's own word that XLA ran
    # 4 steps are too short to measure where their time goes within 5 % of it: nothing was
    # measured (no calibration took any time), and the split event says from when it would be
    splits = kinds(events, "split")
    assert splits and all(e["steps"] == 0 and "calibration_seconds" not in e for e in splits)
    assert splits[-1]["deferred_clock"] > splits[-1]["clock_seconds"] > \
        splits[-1]["training_seconds"] > 0
    epochs = kinds(events, "epoch")
    assert [e["epoch"] for e in epochs] == [1, 2]
    assert all(0.0 <= e["accuracy"] <= 1.0 for e in epochs)
    devices = kinds(events, "device")
    assert devices and devices[0]["devices"][0]["kind"] == "cpu"
    assert devices[0]["devices"][0]["mem_total"] > 0
    logdir = bundle / "output" / "tensorboard" / "worker-0"
    assert logdir.is_dir()
    assert tensorboard_scalars(logdir)["loss"] == step_means(events)  # every step, exactly
    for event in events:
        assert event["v"] == 2 and event["task"] == "worker:0" and isinstance(event["t"], float)


def test_central_storage_with_mixed_bfloat16(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, make_plan(strategy="central_storage", replicas_per_task=2,
                                             precision="mixed_bfloat16", steps=3))
    code, events = run_task(bundle)
    started = assert_trained(code, events, steps=3, replicas=2,
                             log=log_text(bundle, "worker:0"))
    assert started["strategy"] == "central_storage"
    messages = [e["message"] for e in kinds(events, "log")]
    assert any("mixed_bfloat16: compute in bfloat16" in m for m in messages)


def test_multi_worker_mirrored_two_processes(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BUDGET_VARIABLE, "1e6")  # 4 steps: measured whatever it takes
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    bundle = make_bundle(tmp_path, make_plan(strategy="multi_worker_mirrored", cluster=cluster,
                                             steps=4, checkpoint_every=2, profile_steps=[2, 3]))
    procs = [start_task(bundle, f"worker:{i}", cluster) for i in range(2)]
    results = [finish(p, bundle, f"worker:{i}") for i, p in enumerate(procs)]
    means = []
    for i, (code, events) in enumerate(results):
        # on CPU MultiWorkerMirrored gives one replica per worker
        started = assert_trained(code, events, steps=4, replicas=1,
                                 log=log_text(bundle, f"worker:{i}"))
        assert started["replica_ids"] == [i] and started["global_batch"] == 32
        means.append(step_means(events))
        # both workers ran the split's calibration runs together (their collectives matched)
        splits = kinds(events, "split")
        [split] = splits
        assert split["calibrations"] == 1 and split["communication"] > 0, split
    assert means[0] == means[1]  # the mean is all-reduced: the same on every worker
    # the plan's profile steps: TensorFlow's profiler traced steps 2-3 on both workers, one
    # trace each where TensorBoard's profile plugin reads it, which XProf's converter reads
    traces = sorted((bundle / "output" / "tensorboard").glob("*/plugins/profile/*/*.xplane.pb"))
    assert [t.relative_to(bundle / "output" / "tensorboard").parts[0] for t in traces] == \
        ["worker-0", "worker-1"], traces
    for i, (_, events) in enumerate(results):
        said = [e["message"] for e in kinds(events, "log") if e["message"].startswith("profile:")]
        assert len(said) == 1 and said[0].startswith("profile: steps 2-3 captured in "), said
        assert f"worker-{i}" in said[0]
    assert all(n > 0 for n in xprof_op_rows(traces)), traces
    assert [e["step"] for e in kinds(results[0][1], "checkpoint")] == [2, 4]
    assert kinds(results[1][1], "checkpoint") == []  # only the chief reports checkpoints
    ckpt_dir = bundle / "output" / "checkpoints"
    assert (ckpt_dir / "checkpoint").is_file()
    assert not any(p.name.startswith("tmp-worker") for p in ckpt_dir.iterdir())


def test_parameter_server_chief_two_workers_one_ps(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BUDGET_VARIABLE, "1e6")  # 6 steps: measured whatever it takes
    ports = free_ports(4)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"],
               "worker": [f"127.0.0.1:{ports[1]}", f"127.0.0.1:{ports[2]}"],
               "ps": [f"127.0.0.1:{ports[3]}"]}
    # Asynchronous updates from stale parameters: the helpers' learning rate of 0.01 made the
    # first steps overshoot once (loss 44 at step 6); the default 0.001 trains steadily.
    # Deterministic ops off: they forbid the clock the workers' calls time themselves with
    bundle = make_bundle(tmp_path, make_plan(strategy="parameter_server", cluster=cluster,
                                             steps=6, steps_per_epoch=3, checkpoint_every=2,
                                             learning_rate=0.001, deterministic=False,
                                             profile_steps=[5, 6]))
    servers = {t: start_task(bundle, t, cluster) for t in ("ps:0", "worker:0", "worker:1")}
    chief = start_task(bundle, "chief:0", cluster)
    try:
        code, events = finish(chief, bundle, "chief:0", timeout=150)
        started = assert_trained(code, events, steps=6, replicas=1,
                                 log=log_text(bundle, "chief:0"))
        assert started["replica_ids"] == [0] and started["strategy"] == "parameter_server"
        assert [e["step"] for e in kinds(events, "checkpoint")] == [2, 4, 6]
        # the coordinator reports where each worker's step time goes, measured on the worker
        splits = {e["of_task"]: e for e in kinds(events, "split")}
        assert set(splits) == {"worker:0", "worker:1"}, kinds(events, "split")
        for task, event in splits.items():
            split = StepSplit.from_event("chief:0", event)
            assert split is not None and split.task == task
            # compute is told apart unless the round trip, timed alone, took the whole step
            # past its input wait (under load): then the card says it was not measured apart
            assert split.measured in ((INPUT, COMPUTE, COMMUNICATION), (INPUT, COMMUNICATION))
            # the step the worker's last call reached (the other may have run the last one)
            assert split.method == "worker-timed" and 0 < event["step"] <= 6
            # a parameter-server round trip was timed on that worker, and takes part of it
            assert event["probe_reduce"] > 0 and 0 < split.communication <= event["probe_reduce"]
            assert split.input > 0 and split.reporting == 0
            assert split.calibration_seconds > 0 and split.training_seconds > 0
        assert max(e["step"] for e in splits.values()) == 6
        assert verdict([StepSplit.from_event("chief:0", e) or StepSplit("")
                        for e in splits.values()]).task in splits
        # the plan's profile steps: the coordinator traced itself and both workers (through
        # their servers' profiler service) over steps 5-6, one trace a task where
        # TensorBoard's profile plugin reads it, which XProf's converter reads
        said = [e["message"] for e in kinds(events, "log")
                if e["message"].startswith("profile:")]
        assert len(said) == 1 and said[0].startswith(
            "profile: steps 5-6 captured in ") and "chief-0, worker-0, worker-1" in said[0], said
        traces = sorted((bundle / "output" / "tensorboard").glob(
            "*/plugins/profile/*/*.xplane.pb"))
        assert [t.relative_to(bundle / "output" / "tensorboard").parts[0] for t in traces] \
            == ["chief-0", "worker-0", "worker-1"], traces
        assert all(n > 0 for n in xprof_op_rows(traces)), traces
        for task, proc in servers.items():
            assert proc.poll() is None, f"{task} exited by itself"
            first = kinds(read_events(bundle, task), "started")[0]
            assert first["replicas"] == 0
    finally:
        for proc in servers.values():
            stop_server(proc)
    for task, proc in servers.items():
        assert proc.returncode == 143, (task, proc.returncode, log_text(bundle, task)[-2000:])
        assert kinds(read_events(bundle, task), "log")[-1]["message"].startswith("stopped")


def test_tpu_without_a_tpu_fails_fast_and_clearly(tmp_path: Path) -> None:
    port = free_ports(1)[0]  # nothing listens there
    address = f"grpc://127.0.0.1:{port}"
    bundle = make_bundle(tmp_path, make_plan(strategy="tpu", tpu_address=address))
    code, events = run_task(bundle)
    assert code == 1
    # failed by the check that needs no TensorFlow, before any TensorFlow was started (no
    # training child, no `started`), not by the TPU set-up's watchdog
    assert [e["kind"] for e in events] == ["failed"], events
    (failed,) = kinds(events, "failed")
    assert failed["error"] == (f"No TPU answers at {address}: check the address and that "
                               f"the TPU is up")


def test_resume_from_checkpoint_continues_exactly(tmp_path: Path) -> None:
    plan = make_plan(strategy="one_device", steps=6, steps_per_epoch=3, checkpoint_every=3)
    bundle = make_bundle(tmp_path / "resumed", plan)
    straight = make_bundle(tmp_path / "straight", {**plan, "steps": 9})
    reference = start_task(straight, "worker:0")
    code, first = run_task(bundle)
    assert_trained(code, first, steps=6, replicas=1)
    assert [e["step"] for e in kinds(first, "checkpoint")] == [3, 6]

    # resumed past the plan's profile steps: said, not captured
    resumed_plan = {**json.loads((bundle / "plan.json").read_text()), "steps": 9,
                    "profile_steps": [2, 3]}
    (bundle / "plan.json").write_text(json.dumps(resumed_plan))
    # the newest save cut short (a full disk, a power cut): it goes on from the one before
    shard = bundle / "output" / "checkpoints" / "ckpt-6.data-00000-of-00001"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    code, events = run_task(bundle)
    second = events[len(first):]
    assert code == 0 and not kinds(second, "failed"), log_text(bundle, "worker:0")[-3000:]
    (started,) = kinds(second, "started")
    assert started["resumed_from_step"] == 3
    assert "[dtgui] checkpoint ckpt-6 skipped: it was cut short" in log_text(bundle, "worker:0")
    assert any(e["message"].startswith("profile: steps 2-3 were trained before the checkpoint "
                                       "this run resumed from (step 3): not captured")
               for e in kinds(second, "log")), kinds(second, "log")
    assert not (bundle / "output" / "tensorboard").exists() or not list(
        (bundle / "output" / "tensorboard").rglob("*.xplane.pb"))
    assert sorted(step_losses(second)) == [4, 5, 6, 7, 8, 9]
    assert kinds(second, "finished")[0]["steps"] == 9
    assert (bundle / "output" / "checkpoints" / "ckpt-9.index").is_file()

    code, whole = finish(reference, straight)
    assert code == 0
    reference_losses = step_losses(whole)
    assert {s: reference_losses[s] for s in range(4, 10)} == step_losses(second)


def test_stop_is_prompt_even_inside_tensorflow(tmp_path: Path) -> None:
    """A lone MultiWorkerMirrored worker waits for its peer inside TensorFlow (holding the
    GIL); SIGTERM to the task's process group still ends it at once with a "stopped" event."""
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    bundle = make_bundle(tmp_path, make_plan(strategy="multi_worker_mirrored", cluster=cluster))
    proc = start_task(bundle, "worker:0", cluster)
    try:
        wait_for(lambda: any("connecting to the cluster" in e.get("message", "")
                             for e in read_events(bundle, "worker:0")), 60,
                 "the worker never said it was connecting to the cluster")
        time.sleep(1.0)
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(timeout=120)
        # Ended at once (its child killed after the grace of a child that has not started
        # training, a second), not after a training child's grace: room for a loaded machine
        assert time.monotonic() - t0 < STOP_GRACE_SECONDS
    finally:
        stop(proc)
    assert code == 143
    assert kinds(read_events(bundle, "worker:0"), "log")[-1]["message"] == "stopped (SIGTERM)"


def test_user_model_that_raises_gives_a_clear_failed_event(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, make_plan(strategy="mirrored", replicas_per_task=2),
                         user_model=RAISING_MODEL)
    code, events = run_task(bundle)
    assert code == 1
    (failed,) = kinds(events, "failed")
    assert failed["error"] == ("Your model file raised ValueError in build_model(): units "
                               "must be positive")
    assert "user_model.py" in failed["traceback"]
    assert "\n" not in failed["error"]


def test_bundle_copy_trains_a_user_model_with_float16(tmp_path: Path) -> None:
    """The package runs as the bundle's ``dtgui_worker`` copy (relative imports only), with a
    user's model file, mixed_float16 (LossScaleOptimizer) and a checkpoint."""
    bundle = make_bundle(tmp_path, make_plan(steps=3, precision="mixed_float16",
                                             checkpoint_every=2), user_model=GOOD_MODEL)
    copy_worker_package(bundle)
    proc = start_task(bundle, "worker:0", package="dtgui_worker")
    code, events = finish(proc, bundle)
    log = log_text(bundle, "worker:0")
    assert_trained(code, events, steps=3, replicas=1, log=log)
    assert [e["step"] for e in kinds(events, "checkpoint")] == [2, 3]
    assert "this print must not break" in log  # the user's own output goes to the task log
    assert "/dtgui/worker/" not in log


def test_worker_package_contract() -> None:
    """Relative imports only, and importing the package does not import TensorFlow."""
    worker = Path(__file__).resolve().parents[1] / "dtgui" / "worker"
    for path in worker.glob("*.py"):
        text = path.read_text()
        absolute = [name for node in ast.walk(ast.parse(text))
                    for name in (getattr(node, "module", None) if isinstance(node, ast.ImportFrom)
                                 and node.level == 0 else None,
                                 *(a.name for a in getattr(node, "names", ())
                                   if isinstance(node, ast.Import)))
                    if name and name.split(".")[0] == "dtgui"]
        assert not absolute, (path.name, absolute)  # the bundle's copy is dtgui_worker
        # the machine probe is sent whole to another interpreter's stdin: it is one file
        limit = 570 if path.name == "machine_probe.py" else 400
        assert len(text.splitlines()) <= limit, path.name
    code = ("import sys, dtgui.worker, dtgui.worker.events, dtgui.worker.model_file, "
            "dtgui.worker.netcheck, dtgui.worker.supervisor, dtgui.worker.train; "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=worker.parents[1], text=True,
                         capture_output=True, check=True).stdout
    assert out.strip() == "False"


def test_check_model_good_and_bad_files(tmp_path: Path) -> None:
    files = {"good": GOOD_MODEL, "labels": LABELS_TOO_BIG, "missing": MISSING_FUNCTION,
             "syntax": SYNTAX_ERROR}
    for name, text in files.items():
        (tmp_path / f"{name}.py").write_text(text)
    procs = {name: start_module("check_model", str(tmp_path / f"{name}.py"))
             for name in files}
    procs["absent"] = start_module("check_model", str(tmp_path / "absent.py"))
    results = {name: json_result(proc) for name, proc in procs.items()}

    code, good = results["good"]
    assert code == 0, good
    assert good["ok"] is True and good["num_examples"] == 120
    assert good["input_shape"] == [4] and good["output_shape"] == [3]
    # the review's forecast: what a step's all-reduce moves (4x8+8 + 8x3+3 float32
    # parameters) and a batch's forward and backward, timed
    checked = read_result(json.dumps(good), "", "good.py")
    assert checked.gradient_bytes == 67 * 4 and checked.step_seconds > 0

    expected = {
        "labels": "The labels do not fit the model output: labels range 7..8 but the model "
                  "outputs 3 logits (classes 0..2)",
        "missing": "Your model file does not define make_dataset() (it must define "
                   "build_model() and make_dataset())",
        "syntax": "Your model file has a syntax error at line 9: invalid syntax",
        "absent": f"Model file not found: {tmp_path / 'absent.py'}",
    }
    for name, error in expected.items():
        code, result = results[name]
        assert code == 1 and result["ok"] is False
        assert result["error"] == error
        assert "traceback" in result


def test_mirrored_is_deterministic_whatever_the_steps_per_call(tmp_path: Path) -> None:
    """Mirrored on two logical CPUs, deterministic: K steps run in one device call, and the
    per-replica losses are bit-identical whatever K is (fixed, automatic or 1) - so, from
    run to run too (separate processes); every step is in the events, and log_every still
    thins them."""
    plan = make_plan(strategy="mirrored", replicas_per_task=2, steps=40, steps_per_epoch=10,
                     deterministic=True)
    variants = {"one": {"steps_per_call": 1}, "seven": {"steps_per_call": 7},
                "auto": {"steps_per_call": 0},
                "thin": {"steps_per_call": 7, "log_every": 4}}
    bundles = {name: make_bundle(tmp_path / name, {**plan, **extra})
               for name, extra in variants.items()}
    procs = {name: start_task(bundle, "worker:0") for name, bundle in bundles.items()}
    results = {name: finish(proc, bundles[name]) for name, proc in procs.items()}
    for name in ("one", "seven", "auto"):
        code, events = results[name]
        started = assert_trained(code, events, steps=40, replicas=2,
                                 log=log_text(bundles[name], "worker:0"))
        assert started["replica_ids"] == [0, 1] and started["global_batch"] == 32
        assert len(started["devices"]) == 2
        assert [e["epoch"] for e in kinds(events, "epoch")] == [1, 2, 3, 4]
    reference = step_losses(results["one"][1])
    assert reference[1][0] != reference[1][1]  # each replica saw its own slice of the batch
    assert step_losses(results["seven"][1]) == reference
    assert step_losses(results["auto"][1]) == reference
    # calls end at each validation (every epoch of 10 steps)
    assert [e["count"] for e in kinds(results["seven"][1], "steps")] == [7, 3] * 4
    assert len(kinds(results["one"][1], "steps")) == 40
    thin = step_losses(results["thin"][1])
    assert sorted(thin) == list(range(4, 41, 4))
    assert all(thin[s] == reference[s] for s in thin)
    timeline = kinds(results["auto"][1], "finished")[0]["timeline"]
    assert timeline[-1][0] == 40
    assert all(a[1] <= b[1] for a, b in itertools.pairwise(timeline))


def test_a_stop_saves_at_the_step_reached_and_every_worker_agrees(tmp_path: Path) -> None:
    """A stop asked of one MultiWorkerMirrored worker stops both after the same call, and
    the chief saves the checkpoint of that step, with no periodic checkpoints; a Mirrored
    run stopped by SIGINT (Ctrl-C) does the same alone; a ParameterServer run whose every
    task is stopped at once (as Slurm's scancel does) saves from the coordinator while its
    servers serve on, until they are asked again."""
    ports = free_ports(5)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports[:2]]}
    ps_cluster = {"chief": [f"127.0.0.1:{ports[2]}"], "worker": [f"127.0.0.1:{ports[3]}"],
                  "ps": [f"127.0.0.1:{ports[4]}"]}
    long_run = {"steps": 100_000, "steps_per_call": 1, "checkpoint_every": 0}
    bundles = {"mwms": make_bundle(tmp_path / "mwms", make_plan(
                   strategy="multi_worker_mirrored", cluster=cluster, **long_run)),
               "mirrored": make_bundle(tmp_path / "mirrored", make_plan(
                   strategy="mirrored", replicas_per_task=2, **long_run)),
               "ps": make_bundle(tmp_path / "ps", make_plan(
                   strategy="parameter_server", cluster=ps_cluster, learning_rate=0.001,
                   **long_run))}
    procs = {("mwms", f"worker:{i}"): start_task(bundles["mwms"], f"worker:{i}", cluster)
             for i in range(2)}
    procs["mirrored", "worker:0"] = start_task(bundles["mirrored"], "worker:0")
    for task in ("ps:0", "worker:0", "chief:0"):
        procs["ps", task] = start_task(bundles["ps"], task, ps_cluster)
    chiefs = {"mwms": "worker:0", "mirrored": "worker:0", "ps": "chief:0"}

    def trained(name: str) -> int:
        rows = kinds(read_events(bundles[name], chiefs[name]), "steps")
        return max((r["first"] + r["count"] - 1 for r in rows), default=0)

    def log_lines(bundle: Path, task: str) -> list[str]:  # as the dashboard's log reads them
        return [f"[{e.get('level', 'info')}] {e['message']}"
                for e in kinds(read_events(bundle, task), "log")]

    try:
        wait_for(lambda: all(trained(name) >= 3 for name in bundles), 240,
                 "the runs never trained 3 steps")
        # a profile of the next 2 steps asked of the running MultiWorkerMirrored workers and
        # ParameterServer coordinator, as the launcher asks it (the request file, then the
        # signal to every training task's group)
        asked_at = {}
        for name, tasks in (("mwms", ["worker:0", "worker:1"]), ("ps", ["chief:0"])):
            (bundles[name] / "output" / REQUEST_NAME).write_text("2\n")
            asked_at[name] = trained(name)
            for task in tasks:
                os.killpg(procs[name, task].pid, PROFILE_SIGNAL)
        wait_for(lambda: all(captured(log_lines(bundles[name], task)) for name, task in (
            ("mwms", "worker:0"), ("mwms", "worker:1"), ("ps", "chief:0"))), 240,
                 "the profile asked was never written")
        os.killpg(procs["mwms", "worker:1"].pid, signal.SIGTERM)  # worker:1 only
        os.killpg(procs["mirrored", "worker:0"].pid, signal.SIGINT)
        for task in ("ps:0", "worker:0", "chief:0"):
            os.killpg(procs["ps", task].pid, signal.SIGTERM)
        codes = {key: proc.wait(timeout=60) for key, proc in procs.items()
                 if key[1] in ("worker:1", "chief:0") or key[0] != "ps"}
        servers = [procs["ps", "ps:0"], procs["ps", "worker:0"]]
        assert [p.poll() for p in servers] == [None, None]  # serving until asked again
        for proc in servers:
            os.killpg(proc.pid, signal.SIGTERM)
        codes.update({("ps", t): procs["ps", t].wait(timeout=30) for t in ("ps:0", "worker:0")})
    finally:
        for proc in procs.values():
            stop(proc)
    assert set(codes.values()) == {143, 130} and codes["mirrored", "worker:0"] == 130, codes
    for (name, task) in procs:
        bundle = bundles[name]
        events = read_events(bundle, task)
        if name == "ps" and task != "chief:0":
            assert kinds(events, "log")[-1]["message"] == "stopped (SIGTERM)"
            continue
        (stopped,) = [e for e in kinds(events, "log") if "stopped_at" in e]
        reached = stopped["stopped_at"]
        assert stopped["saved"] and reached == trained(name) >= 3, log_text(bundle, task)
        assert stopped["message"].startswith(f"stopped at step {reached} (")
        assert stopped["message"].endswith(f"): the checkpoint of step {reached} is saved")
        # said once, in the event every view shows, not printed into the log as well
        assert stopped["message"] not in log_text(bundle, task)
        if name != "ps":  # (the ParameterServer coordinator says its workers' splits)
            # the stretch's last split (or why none, and how long it trained) said at the stop
            last_split = kinds(events, "split")[-1]
            assert last_split["step"] == reached and last_split["clock_seconds"] > 0, last_split
        if task == chiefs[name]:
            assert [e["step"] for e in kinds(events, "checkpoint")] == [reached]
            assert f'"ckpt-{reached}"' in (bundle / "output/checkpoints/checkpoint").read_text()
    assert {e["stopped_at"] for i in range(2) for e in kinds(
        read_events(bundles["mwms"], f"worker:{i}"), "log") if "stopped_at" in e} \
        == {trained("mwms")}  # the same step on both workers
    # the profile asked: both workers captured the same 2 steps after the request, one trace
    # each where TensorBoard's profile plugin reads it, and trained on to the stop
    spans = {capturing_steps(log_lines(bundles["mwms"], f"worker:{i}")) for i in range(2)}
    [span] = spans
    assert span is not None, log_text(bundles["mwms"], "worker:0")
    first, last = span
    assert last - first == 1 and first > asked_at["mwms"] and last < trained("mwms"), spans
    # and the ParameterServer coordinator captured itself and its worker over 2 steps
    ps_span = capturing_steps(log_lines(bundles["ps"], "chief:0"))
    assert ps_span is not None and ps_span[1] - ps_span[0] == 1, ps_span
    assert ps_span[0] > asked_at["ps"] and ps_span[1] < trained("ps"), ps_span
    for name, stem in (("mwms", "worker-0"), ("mwms", "worker-1"), ("ps", "chief-0"),
                       ("ps", "worker-0")):
        traces = list((bundles[name] / "output" / "tensorboard" / stem / "plugins"
                       / "profile").glob("*/*.xplane.pb"))
        assert len(traces) == 1 and traces[0].stat().st_size > 0, (name, traces)
