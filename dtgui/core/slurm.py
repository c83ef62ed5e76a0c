"""Slurm clusters: a cluster's defaults, the job a run asks for, its batch script, and the
checks of a job against the cluster (docs/slurm.md); what Slurm's commands answer is read in
`dtgui.core.slurm_answers`.

Pure Python (no paramiko, no Qt, no TensorFlow). Every value that reaches the batch script
or a command line is validated here (no shell metacharacters, no line breaks) and quoted
where it is used; the commands themselves run through a `dtgui.remote.commands.CommandRunner`
(`dtgui.remote.slurm`), on the login node.

The batch script starts one Slurm task per dtgui task (`srun`, block distribution: ranks
0..T-1 on the first node, ...). Each task runs `dtgui_worker.slurm_task`, which forms
TF_CONFIG from Slurm's allocation (the nodes' addresses from `scontrol`, port = a base drawn
from the job id + the task's rank, so tasks sharing a node or an address never collide) and
then the bundle's own task script.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from dtgui.core.plans.plan import Plan, TaskSpec
from dtgui.core.slurm_answers import Partition
from dtgui.core.slurm_answers import SlurmError as SlurmError
from dtgui.core.slurm_answers import time_seconds as time_seconds
from dtgui.worker.layout import TASK_DIRS, events_file, job_log_file, log_file
from dtgui.worker.slurm_task import node_of_rank
from dtgui.worker.tf_config import split_task_id, task_tf_config, tf_cluster

JOB_FILE = "job.sbatch"  # the batch script in the bundle
# Slurm warns the job this long before its time limit: its tasks save a checkpoint and stop
# (a stop's bound, dtgui.worker.stop_request.TASK_STOP_SECONDS, and Slurm's up to 60 s early)
TIME_LIMIT_WARNING_SECONDS = 120
JOB_SETTINGS = "slurm.json"  # the job's settings in the bundle (what dtgui submits)
LOCAL_CLUSTER = "local"  # this machine is the cluster's login node
JOB_KIND = "slurm"  # its target's kind: the driver's (dtgui.launch.drivers.slurm)
JOB_LOG = job_log_file("%j")  # the batch step's own output

_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,128}")  # partition, account, QoS
_CONSTRAINT = re.compile(r"[A-Za-z0-9_.&|,:*\[\]()!-]{1,256}")
_MODULE = re.compile(r"[A-Za-z0-9_./+:-]{1,128}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


# -- values --------------------------------------------------------------------------------
def time_text(seconds: int) -> str:
    """Seconds as Slurm's [D-]HH:MM:SS."""
    days, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    mi, s = divmod(rest, 60)
    return (f"{days}-" if days else "") + f"{h:02d}:{mi:02d}:{s:02d}"


def home_path(path: str) -> str:
    """`path` as one shell word, a leading ~/ meaning the home directory."""
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def _field_problems(values: dict[str, str], pattern: re.Pattern[str], what: str) -> list[str]:
    return [f"The {label} {value!r} may hold only letters, digits and {what}."
            for label, value in values.items() if value and not pattern.fullmatch(value)]


@dataclass(frozen=True)
class SlurmDefaults:
    """A registered cluster's defaults for its jobs, and how Python is found on its nodes."""

    partition: str = ""  # "" = the cluster's default partition
    account: str = ""
    qos: str = ""
    time_limit: str = ""  # Slurm's time form; "" = the partition's default
    gpus_per_node: int = 0
    constraint: str = ""  # --constraint (node features)
    modules: tuple[str, ...] = ()  # `module load` each, in order
    venv: str = ""  # a virtual environment's directory on the shared filesystem
    conda_env: str = ""  # a conda environment's name or prefix
    shared_dir: str = "dtgui-runs"  # where bundles go on the shared filesystem (under home)

    def problems(self) -> list[str]:
        out = _field_problems({"partition": self.partition, "account": self.account,
                               "QoS": self.qos}, _NAME, "_ . + -")
        out += _field_problems({"constraint": self.constraint}, _CONSTRAINT,
                               "the operators & | , : * [ ] ( ) !")
        out += [f"The module {m!r} may hold only letters, digits and _ . / + : -"
                for m in self.modules if not _MODULE.fullmatch(m)]
        if self.time_limit and time_seconds(self.time_limit) is None:
            out.append(f"The time limit {self.time_limit!r} is not a Slurm time "
                       "(HH:MM:SS, MM, D-HH:MM...).")
        if not isinstance(self.gpus_per_node, int) or not 0 <= self.gpus_per_node <= 64:
            out.append("GPUs per node must be a whole number from 0 to 64.")
        for label, value in (("virtual environment", self.venv), ("conda environment",
                                                                   self.conda_env),
                             ("shared directory", self.shared_dir)):
            if _CONTROL.search(value) or len(value) > 4096:
                out.append(f"The {label} must be one line.")
        return out

    def validate(self) -> SlurmDefaults:
        problems = self.problems()
        if problems:
            raise SlurmError(" ".join(problems))
        return self

    def setup_lines(self) -> list[str]:
        """The shell lines that make the nodes' Python (quoted)."""
        lines = [f"module load {shlex.quote(m)}" for m in self.modules]
        if self.conda_env:
            lines.append(f"conda activate {shlex.quote(self.conda_env)}")
        if self.venv:
            lines.append(f". {home_path(self.venv.rstrip('/') + '/bin/activate')}")
        return lines

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["modules"] = list(self.modules)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SlurmDefaults:
        if not isinstance(data, dict):
            raise SlurmError("The Slurm settings are not a table.")
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        try:
            known["modules"] = tuple(str(m) for m in known.get("modules", ()))
            known["gpus_per_node"] = int(known.get("gpus_per_node", 0))
            for key in ("partition", "account", "qos", "time_limit", "constraint", "venv",
                        "conda_env", "shared_dir"):
                if key in known:
                    known[key] = str(known[key])
        except (TypeError, ValueError) as exc:
            raise SlurmError(f"The Slurm settings cannot be read: {exc}") from None
        return cls(**known).validate()


@dataclass(frozen=True)
class SlurmJob:
    """What one run asks of a cluster: written to the bundle as slurm.json."""

    cluster: str = LOCAL_CLUSTER  # a registered cluster's name, or "local"
    nodes: int = 1
    tasks_per_node: int = 1
    gpus_per_node: int = 0
    partition: str = ""
    account: str = ""
    qos: str = ""
    time_limit: str = ""
    constraint: str = ""
    setup: tuple[str, ...] = ()  # shell lines run before the tasks (module load, activate)
    python: str = ""  # the nodes' interpreter after setup ("" = python3)
    job_name: str = ""
    requeue: bool = False  # Slurm requeues the job after a node failure or preemption

    @property
    def tasks(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def interpreter(self) -> str:
        return self.python.strip() or "python3"

    def problems(self) -> list[str]:
        out = SlurmDefaults(self.partition, self.account, self.qos, self.time_limit,
                            self.gpus_per_node, self.constraint).problems()
        if not 1 <= self.nodes <= 10000:
            out.append("Nodes must be a whole number from 1.")
        if not 1 <= self.tasks_per_node <= 1024:
            out.append("Tasks per node must be a whole number from 1.")
        if _CONTROL.search(self.python) or any(_CONTROL.search(s) for s in self.setup):
            out.append("The Python and the setup lines must be single lines.")
        if self.job_name and not _NAME.fullmatch(self.job_name):
            out.append(f"The job name {self.job_name!r} may hold only letters, digits and "
                       "_ . + -")
        return out

    def validate(self) -> SlurmJob:
        problems = self.problems()
        if problems:
            raise SlurmError(" ".join(problems))
        return self

    @classmethod
    def from_defaults(cls, cluster: str, defaults: SlurmDefaults, **overrides: Any) -> SlurmJob:
        """The job with a cluster's defaults, then the given values that are not None."""
        job = cls(cluster=cluster, gpus_per_node=defaults.gpus_per_node,
                  partition=defaults.partition, account=defaults.account, qos=defaults.qos,
                  time_limit=defaults.time_limit, constraint=defaults.constraint,
                  setup=tuple(defaults.setup_lines()))
        return replace(job, **{k: v for k, v in overrides.items() if v is not None})

    @property
    def kind(self) -> str:
        """The kind of target its driver is registered as (a sweep's trial job's kind)."""
        return JOB_KIND

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["setup"] = list(self.setup)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SlurmJob:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["setup"] = tuple(str(s) for s in known.get("setup", ()))
        known["requeue"] = bool(known.get("requeue", False))
        return cls(**known).validate()

    @classmethod
    def load(cls, bundle_dir: str | Path) -> SlurmJob | None:
        """The job of a Slurm bundle; None for a bundle that is not one. SlurmError when the
        file cannot be read."""
        path = Path(bundle_dir) / JOB_SETTINGS
        try:
            return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError) as exc:
            raise SlurmError(f"{path} cannot be read ({exc}): export the run again") from exc


# -- the tasks of a Slurm run --------------------------------------------------------------
def job_problems(plan: Plan, job: SlurmJob) -> list[str]:
    """Why the plan's tasks do not fit the job (before anything is submitted)."""
    out = job.problems()
    if job.tasks != len(plan.tasks):
        out.append(f"The run has {len(plan.tasks)} task(s) but the job asks for {job.nodes} "
                   f"node(s) x {job.tasks_per_node} task(s) per node = {job.tasks}: make "
                   "them equal.")
    return out


def rank_order(tasks: Iterable[TaskSpec]) -> list[str]:
    """Task ids by Slurm rank: rank r runs the r-th of the plan's tasks (the coordinator
    first, then the workers, then the parameter servers: `core.placement.task_layout`)."""
    return [t.task_id for t in tasks]


def tf_config_on_nodes(plan: Plan, job: SlurmJob, rank: int) -> dict[str, object]:
    """The TF_CONFIG the task at `rank` forms on the nodes (`dtgui_worker.slurm_task`, from
    the same builder), with the addresses and ports the allocation gives as placeholders."""
    ids = rank_order(plan.tasks)
    counts = [job.tasks_per_node] * max(job.nodes, -(-len(ids) // max(job.tasks_per_node, 1)))
    cluster = tf_cluster((*split_task_id(tid), f"<node {node_of_rank(r, counts) + 1}>:"
                          f"<port base + {r}>") for r, tid in enumerate(ids))
    return task_tf_config(cluster, *split_task_id(ids[rank]))


def batch_script(plan: Plan, job: SlurmJob) -> str:
    """job.sbatch: one Slurm task per dtgui task, the nodes' Python set up first."""
    directives = [f"--job-name={job.job_name or 'dtgui-' + _safe_name(plan.run_name)}",
                  f"--nodes={job.nodes}", f"--ntasks-per-node={job.tasks_per_node}",
                  f"--output={JOB_LOG}"]
    if job.gpus_per_node:
        directives.append(f"--gpus-per-node={job.gpus_per_node}")
    for flag, value in (("partition", job.partition), ("account", job.account),
                        ("qos", job.qos), ("time", job.time_limit),
                        ("constraint", job.constraint)):
        if value:
            directives.append(f"--{flag}={value}")
    # requeue: the same job id runs again, its log keeps every attempt; otherwise a node
    # failure ends the job (Slurm's default may requeue it) and dtgui's restart resubmits
    directives += ["--requeue", "--open-mode=append"] if job.requeue else ["--no-requeue"]
    directives.append(f"--signal=B:USR1@{TIME_LIMIT_WARNING_SECONDS}")
    ranks = ",".join(rank_order(plan.tasks))
    lines = ["#!/bin/bash",
             f"# Run {plan.run_name} ({plan.strategy.title}) as one Slurm job: "
             f"{job.nodes} node(s) x {job.tasks_per_node} task(s).",
             "# Submit it from the bundle directory on the shared filesystem:",
             f"#   sbatch {JOB_FILE}",
             *[f"#SBATCH {d}" for d in directives],
             "",
             "set -u",
             "# The job runs in the directory it was submitted from (or sbatch --chdir)",
             '[ -f plan.json ] || { echo "submit job.sbatch from its bundle directory: '
             'cd BUNDLE; sbatch job.sbatch" >&2; exit 2; }',
             *job.setup,
             f'export PYTHON="${{PYTHON:-{_dq(job.interpreter)}}}"',
             f"mkdir -p {' '.join(TASK_DIRS)}",
             "# The nodes' addresses in node order: TF_CONFIG is formed from them on each node",
             'DTGUI_SLURM_HOSTS="$("$PYTHON" -m dtgui_worker.slurm_task --hosts)" || exit 1',
             "export DTGUI_SLURM_HOSTS",
             f"export DTGUI_SLURM_TASKS={shlex.quote(ranks)}",
             "# One task a rank; a task that fails ends the others",
             "srun --kill-on-bad-exit=1 --distribution=block --ntasks="
             f"{job.tasks} \"$PYTHON\" -m dtgui_worker.slurm_task &",
             "STEP=$!",
             "# Slurm's warning ahead of the time limit (--signal): the tasks save a checkpoint",
             "# at the step they reached and end; the job then ends at its limit (TIMEOUT)",
             "WARNED=",
             "trap 'WARNED=1; echo \"[dtgui] the time limit is near: the tasks save a "
             "checkpoint and stop\"; kill -USR1 \"$STEP\"' USR1",
             'wait "$STEP"; CODE=$?',
             'while [ -n "$WARNED" ] && kill -0 "$STEP" 2>/dev/null; do wait "$STEP"; CODE=$?; done',
             '[ -n "$WARNED" ] && exec sleep infinity',
             'exit "$CODE"',
             ""]
    return "\n".join(lines)


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "-", name)[:100] or "run"


def _dq(text: str) -> str:
    """`text` inside double quotes of a shell word."""
    return re.sub(r'(["\\$`])', r"\\\1", text)


def readme_section(plan: Plan, job: SlurmJob) -> str:
    where = ("this machine (the login node)" if job.cluster == LOCAL_CLUSTER
             else f"the login node of {job.cluster}")
    return f"""
## On a Slurm cluster

This bundle is also one Slurm job: {job.nodes} node(s) x {job.tasks_per_node} task(s) per node
({len(plan.tasks)} task(s): {", ".join(rank_order(plan.tasks))}, by rank). Put the bundle on
the cluster's shared filesystem and, on {where}:

```sh
cd /path/to/this/bundle
sbatch {JOB_FILE}
```

`{JOB_FILE}` sets up Python on the nodes, then `srun` starts one task a rank; each task forms
its TF_CONFIG from Slurm's allocation (`dtgui_worker.slurm_task`: the nodes' addresses from
`scontrol`, port = a base from the job id + the rank) and runs `tasks/<task>.sh`. Logs:
`{log_file("<task>")}` and `{job_log_file("<job id>")}`; events
`{events_file("<task>")}`. `scancel <job id>` stops it.
"""


def job_from_args(cluster: str, defaults: SlurmDefaults, *, nodes: int | None,
                  tasks_per_node: int | None, gpus_per_node: int | None,
                  partition: str | None, time_limit: str | None,
                  account: str | None, python: str = "", requeue: bool = False) -> SlurmJob:
    return SlurmJob.from_defaults(
        cluster, defaults, nodes=nodes, tasks_per_node=tasks_per_node,
        gpus_per_node=gpus_per_node, partition=partition, time_limit=time_limit,
        account=account, python=python or None, requeue=requeue).validate()


def fit_problems(job: SlurmJob, partitions: Sequence[Partition]) -> list[str]:
    """Why the job cannot run on the cluster's partitions (`sinfo`), before it is submitted:
    an unknown partition, more nodes or GPUs per node than it has, a time over its limit."""
    if not partitions:
        return []  # sinfo said nothing: Slurm judges at submit
    part = next((p for p in partitions if p.name == job.partition), None) if job.partition \
        else next((p for p in partitions if p.default), None)
    if part is None:
        if not job.partition:
            return []
        names = ", ".join(p.name for p in partitions)
        return [f"The cluster has no partition {job.partition!r}: choose one of {names}."]
    out = []
    if not part.available:
        out.append(f"The partition {part.name} is not up: choose another one, or wait until "
                   "it is up again.")
    if job.nodes > part.nodes:
        out.append(f"The job asks for {job.nodes} node(s) but the partition {part.name} has "
                   f"{part.nodes}: ask for at most {part.nodes}, or choose another partition.")
    if part.cpus and job.tasks_per_node > part.cpus:  # a task takes at least one CPU
        out.append(f"The job asks for {job.tasks_per_node} task(s) per node but the nodes of "
                   f"{part.name} have {part.cpus} CPU(s): ask for at most {part.cpus} per "
                   "node, or more nodes.")
    if job.gpus_per_node > part.gpus_per_node:
        out.append(f"The job asks for {job.gpus_per_node} GPU(s) per node but the nodes of "
                   f"{part.name} have {part.gpus_per_node or 'none'}: ask for "
                   f"{'at most ' + str(part.gpus_per_node) if part.gpus_per_node else 'none'}, "
                   "or choose a partition with more GPUs.")
    asked = time_seconds(job.time_limit) if job.time_limit else None
    if asked is not None and part.time_limit is not None and asked > part.time_limit:
        out.append(f"The time limit {job.time_limit} is over the partition {part.name}'s "
                   f"{time_text(part.time_limit)}: ask for at most that, or choose another "
                   "partition.")
    return out


def account_problems(account: str, accounts: Sequence[str] | None, user: str) -> list[str]:
    """Whether `account` is one of the user's accounts (`accounts`: sacctmgr's answer; None
    when accounting does not answer: Slurm judges the account at submit)."""
    if not account or accounts is None or account.lower() in accounts:
        return []
    have = ", ".join(accounts) or "none"
    return [f"{user or 'You'} may not use the account {account!r} (Slurm's accounting lists: "
            f"{have}): choose one of those, or leave the account empty for your default."]
