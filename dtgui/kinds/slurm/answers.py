"""What Slurm's commands answer, read: `sinfo` partitions, `squeue` jobs, `scontrol` and
`sacct` job states, `sbatch`'s refusals and the client's errors, each with what to do.

Pure Python (no paramiko, no Qt, no TensorFlow); the commands run in `dtgui.kinds.slurm.remote`.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
UNLIMITED = ("UNLIMITED", "INFINITE", "infinite")


class SlurmError(ValueError):
    """A Slurm value that cannot be used, or a command Slurm refused; the message says why."""


def time_seconds(text: str) -> int | None:
    """Slurm's time forms (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) in seconds;
    None for UNLIMITED or a text that is none of them."""
    text = text.strip()
    m = _TIME.fullmatch(text)
    if not m or text in UNLIMITED:
        return None
    days, a, b, c = m.groups()
    parts = [int(x) for x in (a, b, c) if x is not None]
    if days is not None:  # D-HH[:MM[:SS]]
        h, mi, s = [*parts, 0, 0][:3]
        return int(days) * 86400 + h * 3600 + mi * 60 + s
    if len(parts) == 1:
        return parts[0] * 60
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]
    return parts[0] * 3600 + parts[1] * 60 + parts[2]


SINFO_FORMAT = "%P|%a|%D|%T|%c|%m|%G|%l"
SQUEUE_FORMAT = "%i|%P|%j|%T|%r|%S|%M|%l|%D"


@dataclass
class Partition:
    name: str
    default: bool = False
    available: bool = True
    nodes: int = 0
    states: dict[str, int] = field(default_factory=dict)  # node state -> node count
    cpus: int = 0  # per node (the largest)
    memory_mb: int = 0  # per node (the largest)
    gpus_per_node: int = 0  # the largest
    time_limit: int | None = None  # seconds; None = unlimited

    @property
    def idle_nodes(self) -> int:
        return self.states.get("idle", 0)


@dataclass(frozen=True)
class QueuedJob:
    job_id: str
    partition: str
    name: str
    state: str
    reason: str
    start: str  # expected start time ("N/A" when Slurm does not know)
    elapsed: str
    time_limit: str
    nodes: int


@dataclass
class ClusterFacts:
    """What the probe of a cluster found (`dtgui.kinds.slurm.remote.ask_slurm`)."""

    version: str = ""
    partitions: list[Partition] = field(default_factory=list)
    jobs: list[QueuedJob] = field(default_factory=list)  # the user's own
    problems: list[str] = field(default_factory=list)

    def partition(self, name: str) -> Partition | None:
        """The named partition, or the default one for ""."""
        if not name:
            return next((p for p in self.partitions if p.default), None)
        return next((p for p in self.partitions if p.name == name), None)

    # -- what the Machines panel shows of it (`dtgui.core.machines.KindFacts`) -------------
    tf_cell = "on nodes"
    tf_detail = "TensorFlow on the nodes"
    tf_tip = ("TensorFlow runs on the cluster's nodes, with the Python its setup lines give "
              "(module load, venv, conda); the login node does not import it.")

    def gpus_cell(self) -> str:
        """The GPUs cell of a cluster, short enough for the panel's narrow column: its nodes
        and their most GPUs ("4 nodes × 4 GPUs"; the card has each partition)."""
        if not self.partitions:
            return "?"
        nodes = max(p.nodes for p in self.partitions)  # partitions may share nodes
        gpus = max(p.gpus_per_node for p in self.partitions)
        return f"{nodes} nodes" + (f" × {gpus} GPUs" if gpus else ", no GPU")

    def gpus_tip(self) -> str:
        return "\n".join([*map(partition_text, self.partitions), *self.problems])

    def detail_lines(self) -> list[str]:
        """Slurm's part of a cluster's details (rich text): version, partitions, the user's
        own jobs, and each problem with what to do."""
        e = html.escape
        grey = "<span style='color:#6b7280'>"
        out = []
        if self.version:
            out.append(f"<b>Slurm {e(self.version)}</b> {grey}partitions (sinfo):</span>")
            out += [f"&nbsp;&nbsp;{e(partition_text(p))}" for p in self.partitions]
            mine = (f"Your jobs (squeue): {len(self.jobs)}" if self.jobs else
                    f"{grey}No job of yours in the queue.</span>")
            out.append(mine)
            out += [f"&nbsp;&nbsp;{e(queued_job_text(j))}" for j in self.jobs[:8]]
            if len(self.jobs) > 8:
                out.append(f"&nbsp;&nbsp;{grey}… {len(self.jobs) - 8} more</span>")
        out += [f"<span style='color:#b91c1c'>⚠ Slurm: {e(p)}</span>" for p in self.problems]
        return out


def time_text(seconds: int) -> str:
    """Seconds as Slurm's [D-]HH:MM:SS."""
    days, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    mi, s = divmod(rest, 60)
    return (f"{days}-" if days else "") + f"{h:02d}:{mi:02d}:{s:02d}"


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


def queued_job_text(job: QueuedJob) -> str:
    """'12 train RUNNING on 2 nodes in debug, 0:05 of 1:00:00' ('PENDING (Resources)')."""
    how = f"{job.state} ({job.reason})" if job.reason and job.reason != "None" else job.state
    return (f"{job.job_id} {job.name} {how} on {job.nodes} node{'s' if job.nodes != 1 else ''}"
            f" in {job.partition}, {job.elapsed} of {job.time_limit}")


def _leading_int(text: str) -> int:
    m = re.match(r"\d+", text.strip())
    return int(m.group()) if m else 0


def gres_gpus(gres: str) -> int:
    """GPUs in a gres text ("gpu:a100:4(S:0-1),shard:8" -> 4; "(null)" -> 0)."""
    total = 0
    for part in gres.split(","):
        fields = part.split("(")[0].split(":")
        if fields[0] == "gpu" and len(fields) >= 2:
            total += _leading_int(fields[-1])
    return total


def parse_sinfo(text: str) -> list[Partition]:
    """`sinfo -h -o SINFO_FORMAT` (one line per partition and node state)."""
    found: dict[str, Partition] = {}
    for line in text.splitlines():
        cols = line.strip().split("|")
        if len(cols) != 8:
            continue
        name, avail, nodes, state, cpus, memory, gres, limit = cols
        default = name.endswith("*")
        name = name.rstrip("*")
        part = found.setdefault(name, Partition(name, default))
        part.available = avail.strip() == "up"
        count = _leading_int(nodes)
        part.nodes += count
        key = state.strip().rstrip("*~#!%$@^-")
        part.states[key] = part.states.get(key, 0) + count
        part.cpus = max(part.cpus, _leading_int(cpus.split("/")[-1]) if "/" in cpus
                        else _leading_int(cpus))
        part.memory_mb = max(part.memory_mb, _leading_int(memory))
        part.gpus_per_node = max(part.gpus_per_node, gres_gpus(gres))
        part.time_limit = time_seconds(limit)
    return list(found.values())


def parse_squeue(text: str) -> list[QueuedJob]:
    """`squeue -h -o SQUEUE_FORMAT`."""
    jobs = []
    for line in text.splitlines():
        cols = line.strip().split("|")
        if len(cols) == 9:
            job_id, partition, name, state, reason, start, elapsed, limit = cols[:8]
            jobs.append(QueuedJob(job_id, partition, name, state, reason, start, elapsed,
                                  limit, _leading_int(cols[8])))
    return jobs


def parse_version(text: str) -> str:
    """`sinfo --version` ("slurm 22.05.8") -> "22.05.8"."""
    m = re.search(r"\d+\.\d+(?:\.\d+)?", text)
    return m.group() if m else ""


def parse_job_id(text: str) -> str:
    """`sbatch --parsable` prints "ID" or "ID;CLUSTER"."""
    first = text.strip().splitlines()[-1] if text.strip() else ""
    job_id = first.split(";")[0].strip()
    if not job_id.isdigit():
        raise SlurmError(f"sbatch did not print a job id: {text.strip()!r}")
    return job_id


def parse_scontrol(text: str) -> dict[str, str]:
    """`scontrol show job -o ID`: its Key=Value fields (a value may hold spaces only in the
    last fields, such as Command; those are not needed here)."""
    out: dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep and key not in out:
            out[key] = value
    return out


def submit_error(stderr: str) -> str:
    """sbatch's refusal in one sentence ("Invalid partition name specified")."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        m = re.search(r"error:\s*(?:Batch job submission failed:\s*)?(.+)", line)
        if m:
            return m.group(1).strip()
    return lines[-1] if lines else "sbatch failed without a message"


# sbatch's refusals (Slurm's own texts, lower case) -> what the person can do about them
SUBMIT_HINTS = (
    ("invalid partition", "choose one of the partitions `sinfo` lists"),
    ("invalid account", "choose an account you belong to (`sacctmgr show assoc user=$USER`) "
                        "or leave the account empty"),
    ("invalid qos", "choose a QoS of your account (`sacctmgr show assoc user=$USER "
                    "format=account,qos`) or leave it empty"),
    ("invalid feature", "check the constraint against the nodes' features "
                        "(`sinfo -o '%N %f'`) or leave it empty"),
    ("node configuration is not available", "ask for fewer nodes, tasks or GPUs per node, "
                                            "or another partition"),
    ("node count specification invalid", "ask for fewer nodes, or another partition"),
    ("time limit", "ask for less time (the partition's limit is in `sinfo`)"),
    ("qosmax", "ask for less (your QoS limits it), or wait for your other jobs to end"),
    ("assocmax", "ask for less (your account limits it), or wait for your other jobs to end"),
)


def refusal_text(reason: str) -> str:
    """sbatch's reason and what to do about it."""
    low = reason.lower()
    hint = next((h for key, h in SUBMIT_HINTS if key in low), "")
    return f"Slurm refused the job: {reason}" + (f": {hint}." if hint else ".")


# -- a job's state -------------------------------------------------------------------------
SLURM_COMMAND_HINTS = (  # (what Slurm's client says, what to do), first match wins
    (("not found", "No such file"), "Slurm's client (sinfo, squeue, sbatch) is not on the "
     "login node's PATH: install it there (Debian: slurm-client), or register a login node "
     "that has it."),
    (("Unable to contact slurm controller", "Connection refused", "Socket timed out",
      "Zero Bytes were transmitted"), "Slurm's controller (slurmctld) does not answer: try "
     "Refresh in a minute, or ask the cluster's administrators whether it is up."),
    (("fetch config", "configuration source", "slurm.conf"), "Slurm's configuration is not "
     "found on the login node (/etc/slurm/slurm.conf or SLURM_CONF): is this the cluster's "
     "login node?"),
)


def slurm_command_problem(message: str) -> str:
    """A failed Slurm command's message ("sinfo failed: ...", its last line), with what to do."""
    lines = [line.strip() for line in message.splitlines() if line.strip()] or [message]
    text = f"{lines[0].partition(': ')[0]}: {lines[-1]}" if len(lines) > 1 else lines[0]
    for needles, hint in SLURM_COMMAND_HINTS:
        if any(n.lower() in message.lower() for n in needles):
            return f"{text.rstrip('.')}. {hint}"
    return text


QUEUED_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "RESV_DEL_HOLD",
                           "SUSPENDED", "RESIZING", "STOPPED", "SIGNALING", "STAGE_OUT"})
ACTIVE_STATES = QUEUED_STATES | {"RUNNING", "COMPLETING"}
FAILED_TEXT = {
    "CANCELLED": "the Slurm job was cancelled",
    "TIMEOUT": "the Slurm job reached its time limit",  # describe() names the limit
    "FAILED": "the Slurm job failed",
    "NODE_FAIL": "a node of the Slurm job failed",
    "OUT_OF_MEMORY": "the Slurm job ran out of memory",
    "PREEMPTED": "the Slurm job was preempted",
    "BOOT_FAIL": "a node of the Slurm job failed to boot",
    "DEADLINE": "the Slurm job reached its deadline",
}


@dataclass(frozen=True)
class JobStatus:
    """One look at a job: its state, why it waits, when it is expected to start, its exit."""

    job_id: str
    state: str  # Slurm's JobState (PENDING, RUNNING, COMPLETED, ...); "" = unknown to Slurm
    reason: str = ""
    start: str = ""  # expected or actual start time
    exit_code: int | None = None  # the batch script's exit code, once ended
    signal: int = 0
    time_limit: str = ""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def queued(self) -> bool:
        return self.state in QUEUED_STATES

    @property
    def ended(self) -> bool:
        return bool(self.state) and not self.active

    def describe(self) -> str:
        """One sentence a person reads: where the job is."""
        if self.state == "PENDING":
            why = f" ({self.reason})" if self.reason and self.reason != "None" else ""
            start = (f", expected to start {self.start}" if self.start and self.start
                     not in ("N/A", "Unknown", "None") else "")
            return f"Slurm job {self.job_id} is waiting in the queue{why}{start}"
        if self.state == "TIMEOUT":
            return f"time limit {self.time_limit or 'of the job'} reached (Slurm job {self.job_id})"
        if self.state in FAILED_TEXT:
            return f"{FAILED_TEXT[self.state]} (job {self.job_id})"
        if not self.state:
            return f"Slurm job {self.job_id} is no longer known to Slurm"
        return f"Slurm job {self.job_id} is {self.state.lower()}"


def status_from_scontrol(job_id: str, fields: dict[str, str]) -> JobStatus:
    code, _, sig = fields.get("ExitCode", "").partition(":")
    return JobStatus(job_id, fields.get("JobState", ""), fields.get("Reason", ""),
                     fields.get("StartTime", ""),
                     int(code) if code.isdigit() else None, _leading_int(sig),
                     fields.get("TimeLimit", ""))


SACCT_FIELDS = "State,Reason,ExitCode,Timelimit,Start"


def status_from_sacct(job_id: str, text: str) -> JobStatus | None:
    """`sacct -n -P -X -j ID -o SACCT_FIELDS` (the allocation's line); None when sacct knows
    nothing of the job."""
    for line in text.splitlines():
        cols = line.strip().split("|")
        if len(cols) == 5 and cols[0]:
            state = cols[0].split()[0]  # "CANCELLED by 1000" -> CANCELLED
            code, _, sig = cols[2].partition(":")
            return JobStatus(job_id, state, cols[1], cols[4],
                             int(code) if code.isdigit() else None, _leading_int(sig), cols[3])
    return None


def parse_accounts(text: str) -> list[str]:
    """`sacctmgr -n -P show assoc user=U format=account`: the user's accounts."""
    return sorted({line.strip().lower() for line in text.splitlines() if line.strip()})


def status_from_squeue(job_id: str, line: str) -> JobStatus | None:
    """`squeue -h -j ID -o '%T|%r|%S|%l'`; None when the job is no longer queued."""
    cols = line.strip().split("|")
    if len(cols) != 4 or not cols[0]:
        return None
    return JobStatus(job_id, cols[0], cols[1], cols[2], time_limit=cols[3])
