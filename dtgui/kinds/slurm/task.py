"""One task of a run under Slurm: TF_CONFIG from Slurm's allocation, then the task's script.

Stdlib and the worker package only: the Slurm kind's part of the task program, copied into
its bundles beside the worker package as `dtgui_slurm_task` (`Driver.task_modules`). The
bundle's job.sbatch runs

    python -m dtgui_slurm_task --hosts   (the batch step: the nodes' addresses)
    srun ... python -m dtgui_slurm_task  (every task)

A task's rank (SLURM_PROCID) picks its dtgui task from DTGUI_SLURM_TASKS (task ids by rank);
ranks are laid out in blocks (`srun --distribution=block`): SLURM_STEP_TASKS_PER_NODE says how
many on each node of DTGUI_SLURM_HOSTS. Every task listens on BASE + rank, BASE drawn from the
job id: tasks that share a node (or nodes that share an address) never collide, and two jobs
on one node collide only if their ids are 1000 jobs apart modulo the port range.

The task runs in the task wrapper every task of dtgui runs in (`layout.WRAPPER`: its pid and
exit code in output/pids, its output in output/logs), in the mode that records a task Slurm
stopped by a signal (time limit, scancel) as ended by that signal.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from types import ModuleType
from typing import TYPE_CHECKING


def _worker_module(name: str) -> ModuleType:
    """A module of the worker package: `dtgui_worker`'s in a bundle (copied beside it, where
    dtgui itself is not installed), else dtgui's own (its tests run this from the tree)."""
    try:
        return importlib.import_module(f"dtgui_worker.{name}")
    except ImportError:
        return importlib.import_module(f"dtgui.worker.{name}")


if TYPE_CHECKING:
    from dtgui.worker import layout, tf_config
else:
    layout = _worker_module("layout")
    tf_config = _worker_module("tf_config")
TASK_DIRS, log_file, wrapper_argv = layout.TASK_DIRS, layout.log_file, layout.wrapper_argv
split_task_id, task_tf_config = tf_config.split_task_id, tf_config.task_tf_config
tf_cluster = tf_config.tf_cluster

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


def allocation_tf_config(task_ids: list[str], rank: int, hosts: list[str], counts: list[int],
                         job_id: str) -> dict[str, object]:
    """The TF_CONFIG of the task at `rank`: rank r listens on its node's address, port
    base + r."""
    base = port_base(job_id)
    cluster = tf_cluster((*split_task_id(tid), f"{hosts[node_of_rank(r, counts)]}:{base + r}")
                         for r, tid in enumerate(task_ids))
    return task_tf_config(cluster, *split_task_id(task_ids[rank]))


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
    config = allocation_tf_config(task_ids, rank, hosts, counts, env.get("SLURM_JOB_ID", "0"))
    stem = task_ids[rank].replace(":", "-")
    for directory in TASK_DIRS:
        os.makedirs(directory, exist_ok=True)
    if len(task_ids) > 1:
        os.environ["TF_CONFIG"] = json.dumps(config)
    node = env.get("SLURMD_NODENAME", "") or hosts[node_of_rank(rank, counts)]
    listens = f", listening on {hosts[node_of_rank(rank, counts)]}:" \
        f"{port_base(env.get('SLURM_JOB_ID', '0')) + rank}" if len(task_ids) > 1 else ""
    # the wrapper's output and the task's go to the task's log, as for a task dtgui starts
    log = os.open(log_file(stem), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(log, f"[dtgui] {task_ids[rank]} is rank {rank} of Slurm job "
                  f"{env.get('SLURM_JOB_ID', '?')} on {node}{listens}\n".encode())
    null = os.open(os.devnull, os.O_RDONLY)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    argv = wrapper_argv(stem, signalled=True)
    os.execvp(argv[0], argv)
    return 127  # not reached: exec replaces this process (or raises)


if __name__ == "__main__":
    sys.exit(main())
