"""Slurm without a cluster: a cluster's settings and their validation, what Slurm's commands
answer (real output of Slurm 22.05), the batch script, TF_CONFIG from an allocation, and
`dtgui export --slurm`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import FakeSlurm

from dtgui.core.machines.registry import Machine, MachineError, MachineRegistry
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.run_state import RunState
from dtgui.kinds.slurm import remote as login_node
from dtgui.kinds.slurm import task as slurm_task
from dtgui.kinds.slurm.answers import (
    ClusterFacts,
    JobStatus,
    gres_gpus,
    parse_accounts,
    parse_job_id,
    parse_scontrol,
    parse_sinfo,
    parse_squeue,
    parse_version,
    refusal_text,
    status_from_sacct,
    status_from_scontrol,
    submit_error,
)
from dtgui.kinds.slurm.batch_bundle import place_on_cluster, render_slurm_bundle
from dtgui.kinds.slurm.executor import SlurmExecutor
from dtgui.kinds.slurm.job import (
    SlurmDefaults,
    SlurmError,
    SlurmJob,
    account_problems,
    batch_script,
    fit_problems,
    time_seconds,
)
from dtgui.launch.controller import RunController
from dtgui.worker.profile_request import PROFILE_SIGNAL, REQUEST_NAME

# Captured from the test cluster (tests/fixtures/slurm) and Slurm 22.05.8.
SINFO = "debug*|up|2|idle|2|4000|(null)|infinite\n"
SINFO_GPU = ("gpu|up|3|mixed|64|512000|gpu:a100:4(S:0-1)|2-00:00:00\n"
             "gpu|up|1|drained*|64|512000|gpu:a100:4(S:0-1)|2-00:00:00\n"
             "cpu*|up|10|idle|128|256000|(null)|1:00:00\n")
SQUEUE = "2|debug|wrap|PENDING|Resources|2026-11-24T18:00:00|0:00|UNLIMITED|2\n"
SCONTROL = ("JobId=2 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A "
            "Priority=4294901758 Nice=0 Account=(null) QOS=(null) JobState=CANCELLED "
            "Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 "
            "ExitCode=0:0 RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A "
            "StartTime=2026-11-24T17:39:30 EndTime=2026-11-24T17:39:30 Partition=debug "
            "NodeList= NumNodes=2 WorkDir=/work/main StdOut=/work/main/slurm-2.out\n")
REFUSED = ("sbatch: error: invalid partition specified: nosuch\n"
           "sbatch: error: Batch job submission failed: Invalid partition name specified\n")


def mwms(workers: int = 2) -> Plan:
    return Plan(run_name="slurm-test", strategy=Strategy("multi_worker_mirrored"),
                workers=workers, replicas_per_task=1, steps=10)


def test_time_forms() -> None:
    assert time_seconds("30") == 1800
    assert time_seconds("1:30") == 90
    assert time_seconds("01:00:00") == 3600
    assert time_seconds("2-00:00:00") == 2 * 86400
    assert time_seconds("1-12") == 86400 + 12 * 3600
    assert time_seconds("infinite") is None and time_seconds("1h") is None


def test_cluster_settings_refuse_shell_words_and_quote_paths(tmp_path: Path) -> None:
    for bad in (SlurmDefaults(partition="gpu;rm -rf ~"), SlurmDefaults(account="a b"),
                SlurmDefaults(qos="$(id)"), SlurmDefaults(constraint="a\nb"),
                SlurmDefaults(modules=("cuda`id`",)), SlurmDefaults(time_limit="soon"),
                SlurmDefaults(venv="/a\n/b"), SlurmDefaults(gpus_per_node=-1)):
        with pytest.raises(SlurmError):
            bad.validate()
    ok = SlurmDefaults(partition="gpu", constraint="a100&ib", modules=("cuda/12.2",),
                       venv="~/envs/tf 2", conda_env="tf").validate()
    assert ok.setup_lines() == ["module load cuda/12.2", "conda activate tf",
                                ". \"$HOME\"/'envs/tf 2/bin/activate'"]
    # a cluster is a login node with defaults; it round-trips through the registry's TOML
    registry = MachineRegistry(tmp_path / "machines.toml")
    cluster = Machine("hpc", "login.example.org", user="me", kind="slurm", settings=ok)
    registry.add(cluster)
    registry.save()
    again = MachineRegistry(tmp_path / "machines.toml")
    assert again.load() == ""
    assert again.get("hpc") == cluster and again.get("hpc").kind == "slurm"
    with pytest.raises(MachineError, match="partition"):
        Machine("x", "h", user="u", kind="slurm",
                settings=SlurmDefaults(partition="a|b")).validate()


def test_sinfo_squeue_version_scontrol() -> None:
    (debug,) = parse_sinfo(SINFO)
    assert (debug.name, debug.default, debug.nodes, debug.idle_nodes, debug.cpus,
            debug.memory_mb, debug.gpus_per_node, debug.time_limit) == \
        ("debug", True, 2, 2, 2, 4000, 0, None)
    gpu, cpu = parse_sinfo(SINFO_GPU)
    assert gpu.nodes == 4 and gpu.states == {"mixed": 3, "drained": 1}
    assert gpu.gpus_per_node == 4 and gpu.time_limit == 2 * 86400 and not gpu.default
    assert cpu.default and cpu.time_limit == 3600
    assert gres_gpus("gpu:2,gpu:v100:1(S:0)") == 3 and gres_gpus("(null)") == 0
    (job,) = parse_squeue(SQUEUE)
    assert (job.job_id, job.state, job.reason, job.nodes) == ("2", "PENDING", "Resources", 2)
    assert parse_version("slurm-wlm 22.05.8\n") == "22.05.8"
    status = status_from_scontrol("2", parse_scontrol(SCONTROL))
    assert status.state == "CANCELLED" and status.ended and status.exit_code == 0
    assert "cancelled" in status.describe()
    assert parse_job_id("17\n") == "17" and parse_job_id("18;cluster\n") == "18"
    with pytest.raises(SlurmError):
        parse_job_id("sbatch: error\n")
    assert submit_error(REFUSED) == "Invalid partition name specified"
    # what to do, after sbatch's own words
    assert refusal_text(submit_error(REFUSED)) == (
        "Slurm refused the job: Invalid partition name specified: choose one of the "
        "partitions `sinfo` lists.")
    assert "leave the account empty" in refusal_text(
        "Invalid account or account/partition combination specified")
    assert refusal_text("Something new") == "Slurm refused the job: Something new."


def test_job_states_in_words() -> None:
    waiting = JobStatus("5", "PENDING", "Priority", "2026-11-25T03:00:00")
    assert waiting.queued and not waiting.ended
    assert waiting.describe() == ("Slurm job 5 is waiting in the queue (Priority), expected "
                                  "to start 2026-11-25T03:00:00")
    timeout = JobStatus("6", "TIMEOUT", time_limit="00:10:00")
    assert timeout.ended and timeout.describe() == "time limit 00:10:00 reached (Slurm job 6)"
    assert JobStatus("7", "RUNNING").active and not JobStatus("7", "RUNNING").queued


def test_tf_config_from_the_allocation_never_shares_a_port() -> None:
    assert slurm_task.tasks_per_node("2(x2),1") == [2, 2, 1]
    ids = ["worker:0", "worker:1", "worker:2", "worker:3"]
    # two nodes with the same address (as the test cluster's), two tasks each
    configs = [slurm_task.allocation_tf_config(ids, r, ["127.0.0.1", "127.0.0.1"], [2, 2], "17")
               for r in range(4)]
    cluster = configs[0]["cluster"]
    assert isinstance(cluster, dict)
    addresses = cluster["worker"]
    assert len(set(addresses)) == 4
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(4)]
    # ParameterServer: chief, then servers, then workers, by rank; hosts by block layout
    ps = slurm_task.allocation_tf_config(["chief:0", "ps:0", "worker:0", "worker:1"], 2,
                                         ["n1", "n2"], [2, 2], "3")
    base = slurm_task.port_base("3")
    assert ps == {"cluster": {"chief": [f"n1:{base}"], "ps": [f"n1:{base + 1}"],
                              "worker": [f"n2:{base + 2}", f"n2:{base + 3}"]},
                  "task": {"type": "worker", "index": 0}}


def test_batch_script_and_bundle(tmp_path: Path) -> None:
    job = SlurmJob(nodes=2, tasks_per_node=1, gpus_per_node=1, partition="gpu",
                   account="lab", time_limit="00:30:00", python="/opt/my env/bin/python",
                   setup=("module load cuda/12",))
    script = batch_script(place_on_cluster(mwms(), job), job)
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
                 "#SBATCH --gpus-per-node=1", "#SBATCH --partition=gpu",
                 "#SBATCH --account=lab", "#SBATCH --time=00:30:00", "module load cuda/12",
                 'export PYTHON="${PYTHON:-/opt/my env/bin/python}"',
                 "export DTGUI_SLURM_TASKS=worker:0,worker:1"):
        assert line in script.splitlines()
    assert "#SBATCH --no-requeue" in script.splitlines()
    requeued = batch_script(mwms(), SlurmJob(nodes=2, requeue=True)).splitlines()
    assert "#SBATCH --requeue" in requeued and "#SBATCH --open-mode=append" in requeued
    bundle = render_slurm_bundle(mwms(), tmp_path / "b", job)
    assert (bundle.path / "job.sbatch").read_text() == script
    assert SlurmJob.load(bundle.path) == job
    assert "sbatch job.sbatch" in (bundle.path / "README.md").read_text()
    task = (bundle.path / "tasks" / "worker-0.sh").read_text()
    assert '[ -n "${DTGUI_SLURM_TASKS:-}" ] || export TF_CONFIG=' in task
    with pytest.raises(ValueError, match="3 task"):
        render_slurm_bundle(mwms(3), tmp_path / "c", job)


def test_export_slurm_command(tmp_path: Path) -> None:
    out = tmp_path / "job"
    done = subprocess.run(
        [sys.executable, "-m", "dtgui.cli.main", "export", str(out), "--strategy",
         "multi_worker_mirrored", "--steps", "4", "--slurm", "local", "--nodes", "2",
         "--partition", "debug", "--time", "00:05:00"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "sbatch job.sbatch" in done.stdout
    settings = json.loads((out / "slurm.json").read_text())
    assert settings["nodes"] == 2 and settings["partition"] == "debug"
    assert settings["python"] == sys.executable
    bad = subprocess.run(
        [sys.executable, "-m", "dtgui.cli.main", "export", str(tmp_path / "bad"),
         "--strategy", "multi_worker_mirrored", "--slurm", "local", "--partition", "a;b"],
        capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "partition" in bad.stderr and not (tmp_path / "bad").exists()
    unknown = subprocess.run(
        [sys.executable, "-m", "dtgui.cli.main", "export", str(tmp_path / "u"),
         "--strategy", "multi_worker_mirrored", "--slurm", "nosuchcluster"],
        capture_output=True, text=True, timeout=120,
        env={**__import__("os").environ, "XDG_CONFIG_HOME": str(tmp_path / "cfg")})
    assert unknown.returncode == 2 and "no Slurm cluster is registered" in unknown.stderr


def test_a_job_that_cannot_fit_is_refused_before_submit() -> None:
    partitions = parse_sinfo(SINFO_GPU)
    assert fit_problems(SlurmJob(nodes=2, partition="gpu", gpus_per_node=4,
                                 time_limit="1-00:00:00"), partitions) == []
    problems = fit_problems(SlurmJob(nodes=5, partition="gpu", gpus_per_node=8,
                                     time_limit="3-00:00:00"), partitions)
    assert problems == [
        "The job asks for 5 node(s) but the partition gpu has 4: ask for at most 4, or "
        "choose another partition.",
        "The job asks for 8 GPU(s) per node but the nodes of gpu have 4: ask for at most 4, "
        "or choose a partition with more GPUs.",
        "The time limit 3-00:00:00 is over the partition gpu's 2-00:00:00: ask for at most "
        "that, or choose another partition."]
    assert fit_problems(SlurmJob(partition="big"), partitions) == [
        "The cluster has no partition 'big': choose one of gpu, cpu."]
    assert fit_problems(SlurmJob(time_limit="02:00:00"), partitions) == [  # the default: cpu
        "The time limit 02:00:00 is over the partition cpu's 01:00:00: ask for at most that, "
        "or choose another partition."]
    assert "have none: ask for none" in fit_problems(SlurmJob(gpus_per_node=1), partitions)[0]
    assert fit_problems(SlurmJob(tasks_per_node=200), partitions) == [
        "The job asks for 200 task(s) per node but the nodes of cpu have 128 CPU(s): ask for "
        "at most 128 per node, or more nodes."]
    # the accounts sacctmgr lists (None: accounting does not answer, Slurm judges at submit)
    accounts = parse_accounts("lab\nPhysics\n")
    assert accounts == ["lab", "physics"]
    assert account_problems("lab", accounts, "me") == []
    assert account_problems("chem", accounts, "me") == [
        "me may not use the account 'chem' (Slurm's accounting lists: lab, physics): choose "
        "one of those, or leave the account empty for your default."]
    assert account_problems("chem", None, "me") == []


def test_accounting_is_used_when_it_answers() -> None:
    """The account check and an ended job's state: `sacctmgr`/`sacct` where accounting
    answers; where it does not, the account is left to sbatch and the state to scontrol."""
    facts = ClusterFacts("22.05.8", parse_sinfo(SINFO))
    with_accounting = FakeSlurm({"id": "me\n", "sacctmgr": "lab\n",
                                 "sacct": "TIMEOUT|TimeLimit|0:15|00:05:00|2026-11-24T18:00:00\n"})
    check = login_node.check_job(with_accounting, SlurmJob(account="chem"), facts)
    assert check.problems == [account_problems("chem", ["lab"], "me")[0]] and not check.notes
    ended = login_node.status(with_accounting, "12")  # squeue and scontrol forgot it
    assert (ended.state, ended.time_limit, ended.exit_code, ended.signal) == \
        ("TIMEOUT", "00:05:00", 0, 15)
    cancelled = status_from_sacct("3", "CANCELLED by 1000|None|0:0|UNLIMITED|N/A\n")
    assert cancelled is not None and cancelled.state == "CANCELLED"
    without = FakeSlurm({"id": "me\n"}, failing={"sacctmgr", "sacct"})
    check = login_node.check_job(without, SlurmJob(account="chem"), facts)
    assert check.problems == [] and check.notes == [
        "The account 'chem' cannot be checked before submit (Slurm's accounting does not "
        "answer `sacctmgr` here): Slurm judges it when the job is submitted."]
    assert login_node.status(without, "12").state == ""


def slurm_executor(tmp_path: Path, answers: dict[str, str]) -> SlurmExecutor:
    bundle = render_slurm_bundle(mwms(), tmp_path / "b", SlurmJob(nodes=2))
    executor = SlurmExecutor("local", bundle, bundle.plan.tasks, FakeSlurm(answers),
                             str(bundle.path))
    executor.adopt({"worker:0": 12, "worker:1": 12})
    return executor


def test_a_pending_job_is_queued_not_hung(tmp_path: Path) -> None:
    executor = slurm_executor(tmp_path, {"squeue": "PENDING|Priority|N/A|1:00:00\n",
                                         "squeue --start": "2026-11-25T03:00:00\n"})
    assert executor.job_id == "12"
    first = executor.poll().tasks
    assert all(t.alive and t.queued for t in first.values())
    assert first["worker:0"].log_lines == [
        "[dtgui] Slurm job 12 is waiting in the queue (Priority), expected to start "
        "2026-11-25T03:00:00"]
    again = executor.poll()
    assert again.tasks["worker:0"].log_lines == []  # said once, until it changes
    assert again.note.startswith("Slurm job 12 is waiting in the queue (Priority)")


def test_a_recorded_job_is_left_while_it_waits_or_runs_gone_once_it_ended(
        tmp_path: Path) -> None:
    """What a run record saying "running" is checked against (dtgui.launch.start.run_check):
    the job's state through the kind's driver; a job Slurm no longer knows of is not told."""
    from dtgui.core.runs.records import TaskRecord
    from dtgui.launch.drivers import DRIVERS

    answers = {"squeue": "PENDING|Priority|N/A|1:00:00\n"}
    executor = slurm_executor(tmp_path, answers)
    tasks = [TaskRecord("worker:0", "local", job_id="12"),
             TaskRecord("worker:1", "local", job_id="12")]
    left = DRIVERS["slurm"].tasks_left
    assert left(executor, tasks) == {"worker:0": True, "worker:1": True}
    answers["squeue"] = "RUNNING|None|2026-11-24T18:00:00|UNLIMITED\n"
    assert left(executor, tasks) == {"worker:0": True, "worker:1": True}
    answers["squeue"], answers["scontrol"] = "", "JobId=12 JobState=NODE_FAIL Reason=None\n"
    assert left(executor, tasks) == {"worker:0": False, "worker:1": False}
    answers["scontrol"] = ""
    assert left(executor, tasks) == {}
    # its launcher died while submitting it: the job by the run's directory, if Slurm holds it
    unrecorded = [TaskRecord(t.task, "local") for t in tasks]
    answers["squeue"] = f"11|/elsewhere\n12|{executor.run_dir}/\n"
    assert left(executor, unrecorded) == {"worker:0": True, "worker:1": True}
    answers["squeue"] = "11|/elsewhere\n"
    assert left(executor, unrecorded) == {"worker:0": False, "worker:1": False}


def test_a_requeued_job_waits_again_whatever_its_first_attempt_wrote(tmp_path: Path) -> None:
    """--requeue: Slurm stops the tasks (exit 143) and queues the same job again; the tasks
    count as queued, not ended, and Stop still cancels the job."""
    answers = {"squeue": "RUNNING|None|2026-11-24T18:00:00|UNLIMITED\n"}
    executor = slurm_executor(tmp_path, answers)
    assert all(t.alive for t in executor.poll().tasks.values())
    (executor.bundle.output / "pids").mkdir(parents=True, exist_ok=True)
    for stem in ("worker-0", "worker-1"):
        (executor.bundle.output / "pids" / f"{stem}.exit").write_text("143\n")
    answers["squeue"] = "COMPLETING|None|2026-11-24T18:00:00|UNLIMITED\n"
    assert all(t.alive and t.exit_code is None for t in executor.poll().tasks.values())
    answers["squeue"] = "PENDING|BeginTime|2026-11-24T18:02:00|UNLIMITED\n"
    polled = executor.poll()
    assert all(t.alive and t.queued for t in polled.tasks.values())
    assert polled.note == ("Slurm requeued the job (a node failed, or it was preempted); Slurm "
                           "job 12 is waiting in the queue (BeginTime), expected to start "
                           "2026-11-24T18:02:00")
    executor.signal(15)
    assert isinstance(executor.runner, FakeSlurm)
    assert ["scancel", "12"] in executor.runner.calls


def test_a_time_limit_fails_the_run_as_such(tmp_path: Path) -> None:
    executor = slurm_executor(tmp_path, {
        "scontrol": "JobId=12 JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15 "
                    "TimeLimit=00:10:00\n"})
    log = executor.bundle.output / "logs" / "slurm-12.log"
    log.write_text("slurmstepd: error: *** JOB 12 CANCELLED DUE TO TIME LIMIT ***\n")
    events = executor.bundle.output / "events-worker-0.jsonl"
    events.write_text(json.dumps({"v": 2, "kind": "checkpoint", "task": "worker:0", "t": 1.0,
                                  "step": 40, "path": "output/checkpoints/ckpt-40"}) + "\n")
    controller = RunController(executor.bundle, executors=[executor])
    controller.attach()
    assert controller.wait(20)
    assert controller.state is RunState.FAILED
    assert ("time limit 00:10:00 reached (Slurm job 12); the last checkpoint: "
            "output/checkpoints/ckpt-40 (step 40)") in controller.message
    assert any("CANCELLED DUE TO TIME LIMIT" in line
               for line in controller.metrics.log_lines("worker:0"))
    assert isinstance(executor.runner, FakeSlurm)
    assert not any(c[0] == "scancel" for c in executor.runner.calls)


def test_a_profile_asked_reaches_the_job_steps_not_the_batch_script(tmp_path: Path) -> None:
    """The request file goes into the job's output folder; the signal to the processes of
    the job's steps (the tasks, whose wrapper and supervisor ignore it), never `--full`: the
    batch script would die of it."""
    executor = slurm_executor(tmp_path, {"squeue": "RUNNING|None|2026-11-24T18:00:00|UNLIMITED\n"})
    assert all(t.alive for t in executor.poll().tasks.values())
    executor.put_output_file(REQUEST_NAME, b"7\n")
    assert (Path(executor.directory) / "output" / REQUEST_NAME).read_text() == "7\n"
    executor.signal(PROFILE_SIGNAL)
    assert isinstance(executor.runner, FakeSlurm)
    assert [c for c in executor.runner.calls if c[0] == "scancel"] == \
        [["scancel", "--signal=USR2", "12"]]
