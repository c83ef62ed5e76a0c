"""One task of a run under Slurm: TF_CONFIG from Slurm's allocation, then the task's script.

Stdlib only (copied into bundles as `dtgui_worker.slurm_task`). The bundle's job.sbatch runs

    python -m dtgui_worker.slurm_task --hosts   (the batch step: the nodes' addresses)
    srun ... python -m dtgui_worker.slurm_task  (every task)

A task's rank (SLURM_PROCID) picks its dtgui task from DTGUI_SLURM_TASKS (task ids by rank);
ranks are laid out in blocks (`srun --distribution=block`): SLURM_STEP_TASKS_PER_NODE says how
many on each node of DTGUI_SLURM_HOSTS. Every task listens on BASE + rank, BASE drawn from the
job id: tasks that share a node (or nodes that share an address) never collide, and two jobs
on one node collide only if their ids are 1000 jobs apart modulo the port range.

The task's output goes to output/logs/<task>.log, its exit code to output/pids/<task>.exit,
as for a task dtgui starts itself (dtgui.launch.executor).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

PORT_LOW = 20000
PORT_SPAN = 40000
PORTS_PER_JOB = 40  # tasks of one job sharing a node before its ports meet the next job's


def tasks_per_node(text: str) -> list[int]:
    """SLURM_*_TASKS_PER_NODE ("2(x3),1") -> [2, 2, 2, 1]."""
    out: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if m:
            out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def node_of_rank(rank: int, counts: list[int]) -> int:
    for node, count in enumerate(counts):
        if rank < count:
            return node
        rank -= count
    raise ValueError(f"rank {rank} is beyond the tasks of the allocation {counts}")


def port_base(job_id: str) -> int:
    digits = int(job_id) if job_id.isdigit() else 0
    return PORT_LOW + (digits * PORTS_PER_JOB) % PORT_SPAN


def tf_config(task_ids: list[str], rank: int, hosts: list[str], counts: list[int],
              job_id: str) -> dict[str, object]:
    """The TF_CONFIG of the task at `rank`."""
    base = port_base(job_id)
    cluster: dict[str, list[str]] = {}
    for r, tid in enumerate(task_ids):
        kind = tid.split(":")[0]
        cluster.setdefault(kind, []).append(f"{hosts[node_of_rank(r, counts)]}:{base + r}")
    kind, _, index = task_ids[rank].partition(":")
    return {"cluster": cluster, "task": {"type": kind, "index": int(index)}}


def node_addresses(nodelist: str) -> list[str]:
    """The address of every node of `nodelist`, in order: Slurm's NodeAddr (what Slurm
    itself reaches the node at; the node's name unless the cluster says otherwise)."""
    names = subprocess.run(["scontrol", "show", "hostnames", nodelist], check=True,
                           capture_output=True, text=True).stdout.split()
    out = []
    for name in names:
        shown = subprocess.run(["scontrol", "show", "node", "-o", name], capture_output=True,
                               text=True).stdout
        m = re.search(r"\bNodeAddr=(\S+)", shown)
        out.append(m.group(1) if m else name)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    env = os.environ
    if args == ["--hosts"]:
        print(" ".join(node_addresses(env["SLURM_JOB_NODELIST"])))
        return 0
    rank = int(env["SLURM_PROCID"])
    task_ids = env["DTGUI_SLURM_TASKS"].split(",")
    if rank >= len(task_ids):
        print(f"rank {rank} has no task: the job has more tasks than the run", file=sys.stderr)
        return 2
    counts = tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE")
                            or env.get("SLURM_TASKS_PER_NODE", "1"))
    hosts = env.get("DTGUI_SLURM_HOSTS", "").split() or \
        node_addresses(env.get("SLURM_STEP_NODELIST") or env["SLURM_JOB_NODELIST"])
    config = tf_config(task_ids, rank, hosts, counts, env.get("SLURM_JOB_ID", "0"))
    stem = task_ids[rank].replace(":", "-")
    os.makedirs("output/logs", exist_ok=True)
    os.makedirs("output/pids", exist_ok=True)
    child_env = {**env, "TF_CONFIG": json.dumps(config)} if len(task_ids) > 1 else dict(env)
    with open(f"output/pids/{stem}.pid", "w") as f:
        f.write(f"{os.getpid()}\n")
    with open(f"output/logs/{stem}.log", "ab") as log:
        node = env.get("SLURMD_NODENAME", "") or hosts[node_of_rank(rank, counts)]
        listens = f", listening on {hosts[node_of_rank(rank, counts)]}:" \
            f"{port_base(env.get('SLURM_JOB_ID', '0')) + rank}" if len(task_ids) > 1 else ""
        log.write(f"[dtgui] {task_ids[rank]} is rank {rank} of Slurm job "
                  f"{env.get('SLURM_JOB_ID', '?')} on {node}{listens}\n".encode())
        log.flush()
        child = subprocess.Popen(["sh", f"tasks/{stem}.sh"], stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=subprocess.STDOUT, env=child_env)
        stopped: list[int] = []

        def forward(signum: int, _frame: object) -> None:
            stopped.append(signum)
            child.send_signal(signum)

        for sig in (signal.SIGTERM, signal.SIGINT):  # Slurm's time limit, scancel
            signal.signal(sig, forward)
        code = child.wait()
    # a task Slurm stopped ended by its signal (128 + N), whatever its training process said:
    # the job's state tells why (time limit, cancelled, preempted)
    code = 128 + stopped[0] if stopped else code if code >= 0 else 128 - code
    with open(f"output/pids/{stem}.exit", "w") as f:
        f.write(f"{code}\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
