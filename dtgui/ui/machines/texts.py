"""How probe results read in the machines panel: short cells, full details on demand."""

from __future__ import annotations

import html
import re
from collections import Counter

from dtgui.core.machines.registry import AUTH_LABELS, Machine, RemoteFacts
from dtgui.core.slurm import time_text
from dtgui.core.slurm_answers import ClusterFacts, Partition, QueuedJob


def short_gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def short_os(facts: RemoteFacts) -> str:
    """'Debian GNU/Linux 12 (bookworm)' -> 'Debian 12'; 'Ubuntu 22.04.4 LTS' -> 'Ubuntu 22.04'."""
    name = facts.os_name or facts.kernel
    name = re.sub(r"\s*\(.*?\)", "", name).replace("GNU/Linux ", "").replace(" LTS", "")
    m = re.fullmatch(r"(Ubuntu \d+\.\d+)\.\d+", name)
    return m.group(1) if m else name.strip()


def short_address(machine: Machine) -> str:
    host = f"[{machine.host}]" if ":" in machine.host else machine.host
    return host if machine.port == 22 else f"{host}:{machine.port}"


def address_tooltip(machine: Machine) -> str:
    how = AUTH_LABELS.get(machine.auth, machine.auth)
    if machine.auth == "key":
        how += f" ({machine.key_file})"
    via = f"\nthrough the jump host {machine.jump_host}" if machine.jump_host else ""
    return f"{machine.address}\nsigns in with {how}{via}"


NODES_TF = ("TensorFlow runs on the cluster's nodes, with the Python its setup lines give "
            "(module load, venv, conda); the login node does not import it.")


def short_tf(facts: RemoteFacts) -> str:
    if facts.cluster is not None:
        return "on nodes"
    if facts.tf_installed:
        return facts.tf_version
    return "none" if facts.tf_version == "not installed" else "?"


def short_gpus(facts: RemoteFacts) -> str:
    if facts.cluster is not None:
        return short_cluster(facts.cluster)
    if not facts.gpus:
        return "none" if not facts.gpu_error or "not found" in facts.gpu_error else "?"
    names = Counter(g.name.replace("NVIDIA ", "").replace("GeForce ", "") for g in facts.gpus)
    return ", ".join(f"{n}× {name}" for name, n in names.items())


def gpu_tooltip(facts: RemoteFacts) -> str:
    if facts.cluster is not None:
        return "\n".join([*map(partition_text, facts.cluster.partitions),
                          *facts.cluster.problems])
    if not facts.gpus:
        return facts.gpu_error or "No NVIDIA GPU"
    lines = [f"{g.index}: {g.name}, {short_gib(g.mem_total)}"
             + (f", compute capability {g.compute_capability}" if g.compute_capability else "")
             for g in facts.gpus]
    lines.append(f"driver {facts.driver or '?'}, CUDA {facts.cuda_version or '?'}")
    return "\n".join(lines)


def details_html(machine: Machine, facts: RemoteFacts | None) -> str:
    """Everything the probe found, as a few lines of rich text."""
    e = html.escape
    head = f"<b>{e(machine.name)}</b> <span style='color:#6b7280'>{e(machine.address)}</span>"
    if facts is None:
        return head
    cpu = f"{facts.cpu_cores} cores" + (f" ({e(facts.cpu_model)})" if facts.cpu_model else "")
    py = (f"Python {e(facts.python_version)} <span style='color:#6b7280'>"
          f"{e(facts.python_path)}</span>" if facts.python_path
          else f"no {e(facts.python_command)}")
    if facts.cluster is not None:
        tf = "TensorFlow on the nodes"
    elif facts.tf_installed:
        tf = f"TensorFlow {e(facts.tf_version)}"
    elif facts.tf_error:
        tf = f"TensorFlow: {e(facts.tf_error)}"
    else:
        tf = "TensorFlow not installed"
    if facts.gpus:
        gpus = e(gpu_tooltip(facts)).replace("\n", "; ")
    else:
        gpus = "no NVIDIA GPU" + (f" — {e(facts.gpu_error)}" if facts.gpu_error else "")
    lines = [
        head,
        f"{e(facts.os_name or '?')} · {e(facts.kernel)} {e(facts.arch)}",
        f"{cpu} · {short_gib(facts.ram_total)} RAM",
        f"{py} · {tf}",
    ]
    if facts.cluster is None or facts.gpus:  # a login node's GPUs: the nodes' are below
        lines.append(gpus)
    if facts.gpus and facts.cluster is None:  # whether TensorFlow can use them, and the fix
        lines.append(e(facts.as_machine_facts().explanation()))
    lines += [f"<span style='color:#b45309'>⚠ {e(w)}</span>" for w in facts.warnings]
    if facts.cluster is not None:
        lines += cluster_lines(facts.cluster)
    return "<br>".join(lines)


# -- a Slurm cluster (its login node's probe) ------------------------------------------------
def short_cluster(cluster: ClusterFacts) -> str:
    """The GPUs cell of a cluster, short enough for the panel's narrow column: its nodes and
    their most GPUs ("4 nodes × 4 GPUs"; the card has each partition)."""
    if not cluster.partitions:
        return "?"
    nodes = max(p.nodes for p in cluster.partitions)  # partitions may share nodes
    gpus = max(p.gpus_per_node for p in cluster.partitions)
    return f"{nodes} nodes" + (f" × {gpus} GPUs" if gpus else ", no GPU")


def partition_text(part: Partition) -> str:
    """'debug (default): 2 nodes (2 idle) · 2 CPUs, 3.9 GiB, no GPU per node · no limit'."""
    name = part.name + (" (default)" if part.default else "") + \
        ("" if part.available else " (down)")
    states = ", ".join(f"{n} {state}" for state, n in sorted(part.states.items(),
                                                               key=lambda s: -s[1]))
    gpus = f"{part.gpus_per_node} GPUs" if part.gpus_per_node else "no GPU"
    limit = time_text(part.time_limit) if part.time_limit is not None else "no"
    return (f"{name}: {part.nodes} node{'s' if part.nodes != 1 else ''}"
            + (f" ({states})" if states else "")
            + f" · {part.cpus} CPUs, {part.memory_mb / 1024:.1f} GiB, {gpus} per node"
            + f" · {limit} time limit")


def job_text(job: QueuedJob) -> str:
    """'12 train RUNNING on 2 nodes in debug, 0:05 of 1:00:00' ('PENDING (Resources)')."""
    how = f"{job.state} ({job.reason})" if job.reason and job.reason != "None" else job.state
    return (f"{job.job_id} {job.name} {how} on {job.nodes} node{'s' if job.nodes != 1 else ''}"
            f" in {job.partition}, {job.elapsed} of {job.time_limit}")


def cluster_lines(cluster: ClusterFacts) -> list[str]:
    """Slurm's part of a cluster's details: version, partitions, the user's own jobs, and
    each problem with what to do."""
    e = html.escape
    grey = "<span style='color:#6b7280'>"
    out = []
    if cluster.version:
        out.append(f"<b>Slurm {e(cluster.version)}</b> {grey}partitions (sinfo):</span>")
        out += [f"&nbsp;&nbsp;{e(partition_text(p))}" for p in cluster.partitions]
        mine = (f"Your jobs (squeue): {len(cluster.jobs)}" if cluster.jobs else
                f"{grey}No job of yours in the queue.</span>")
        out.append(mine)
        out += [f"&nbsp;&nbsp;{e(job_text(j))}" for j in cluster.jobs[:8]]
        if len(cluster.jobs) > 8:
            out.append(f"&nbsp;&nbsp;{grey}… {len(cluster.jobs) - 8} more</span>")
    out += [f"<span style='color:#b91c1c'>⚠ Slurm: {e(p)}</span>" for p in cluster.problems]
    return out
