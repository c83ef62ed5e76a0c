"""Slurm's commands on a cluster's login node, through a `CommandRunner` (the same argv here,
when this machine is the login node, or over SSH). The answers are read by
`dtgui.kinds.slurm.job`; every argument is a separate argv word (quoted over SSH).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dtgui.kinds.slurm.answers import (
    SACCT_FIELDS,
    SINFO_FORMAT,
    SQUEUE_FORMAT,
    ClusterFacts,
    JobStatus,
    parse_accounts,
    parse_job_id,
    parse_scontrol,
    parse_sinfo,
    parse_squeue,
    parse_version,
    refusal_text,
    slurm_command_problem,
    status_from_sacct,
    status_from_scontrol,
    status_from_squeue,
    submit_error,
)
from dtgui.kinds.slurm.job import SlurmError, SlurmJob, account_problems, fit_problems

if TYPE_CHECKING:
    from dtgui.remote.commands import CommandRunner

TIMEOUT = 30.0


def _slurm_output(runner: CommandRunner, argv: Sequence[str], what: str) -> str:
    code, out, err = runner.run(list(argv), TIMEOUT)
    if code != 0:
        reason = err.decode("utf-8", "replace").strip() or f"exit {code}"
        raise SlurmError(f"{what} failed: {reason}")
    return out.decode("utf-8", "replace")


def ask_slurm(runner: CommandRunner, user: str = "") -> ClusterFacts:
    """Slurm's version, the partitions, and the user's jobs ("" = the login user)."""
    facts = ClusterFacts()
    try:
        facts.version = parse_version(_slurm_output(runner, ["sinfo", "--version"], "sinfo"))
    except SlurmError as exc:
        facts.problems.append(slurm_command_problem(str(exc)))
        return facts
    try:
        facts.partitions = parse_sinfo(_slurm_output(runner, ["sinfo", "-h", "-o", SINFO_FORMAT],
                                                     "sinfo"))
    except SlurmError as exc:
        facts.problems.append(slurm_command_problem(str(exc)))
        return facts  # squeue would fail the same way
    who = ["-u", user] if user else ["--me"]
    try:
        facts.jobs = parse_squeue(_slurm_output(runner, ["squeue", "-h", *who, "-o", SQUEUE_FORMAT],
                                                "squeue"))
    except SlurmError as exc:
        facts.problems.append(slurm_command_problem(str(exc)))
    return facts


def make_run_dir(runner: CommandRunner, shared_dir: str, run_id: str) -> str:
    """The run's directory `~/<shared_dir>/<run_id>` on the cluster's shared filesystem, made
    there; its absolute path (removed by `dtgui.remote.commands.remove_run_dir`). SlurmError
    when it cannot be made."""
    code, out, err = runner.run(["sh", "-c", 'mkdir -p -- "$HOME/$1" && cd -- "$HOME/$1" && pwd',
                                 "sh", f"{shared_dir}/{run_id}"], TIMEOUT)
    if code != 0:
        raise SlurmError(f"cannot make the run's directory under {shared_dir}: "
                         f"{err.decode('utf-8', 'replace').strip()}")
    return out.decode("utf-8", "replace").strip()


def submit(runner: CommandRunner, directory: str, script: str) -> str:
    """`sbatch --parsable` of `script` in `directory` (the job's working directory): the job
    id. SlurmError with sbatch's own reason when it refuses the job."""
    code, out, err = runner.run(["sbatch", "--parsable", f"--chdir={directory}",
                                 f"{directory.rstrip('/')}/{script}"], TIMEOUT)
    if code != 0:
        raise SlurmError(refusal_text(submit_error(err.decode("utf-8", "replace"))))
    return parse_job_id(out.decode("utf-8", "replace"))


def jobs_in(runner: CommandRunner, directory: str) -> list[str]:
    """The jobs Slurm holds (waiting or running) whose working directory is `directory` (a
    run's: `submit` sets it): the job of a launch whose launcher died before it recorded the
    job's id. SlurmError when squeue does not answer."""
    out = _slurm_output(runner, ["squeue", "-h", "-o", "%i|%Z"], "squeue")
    wanted = directory.rstrip("/")
    return [job for job, _, where in (line.strip().partition("|") for line in out.splitlines())
            if job and where.rstrip("/") == wanted]


def status(runner: CommandRunner, job_id: str) -> JobStatus:
    """The job's state: `squeue` while it is queued or running, then `scontrol show job`
    (which answers without accounting, for MinJobAge after the end), then `sacct` (which
    remembers ended jobs where accounting is on)."""
    code, out, _ = runner.run(["squeue", "-h", "-j", job_id, "-o", "%T|%r|%S|%l"], TIMEOUT)
    if code == 0:
        found = status_from_squeue(job_id, out.decode("utf-8", "replace").strip())
        if found is not None and found.active:
            return found
    code, out, _ = runner.run(["scontrol", "show", "job", "-o", job_id], TIMEOUT)
    fields = parse_scontrol(out.decode("utf-8", "replace")) if code == 0 else {}
    if fields.get("JobState"):
        return status_from_scontrol(job_id, fields)
    code, out, _ = runner.run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", SACCT_FIELDS],
                              TIMEOUT)  # "accounting storage is disabled": exit 1
    remembered = status_from_sacct(job_id, out.decode("utf-8", "replace")) if code == 0 \
        else None
    return remembered or JobStatus(job_id, "")


def user_accounts(runner: CommandRunner) -> tuple[str, list[str] | None]:
    """The login user and their accounts (`sacctmgr show assoc`); None when accounting does
    not answer (no slurmdbd: the accounts cannot be known before submit)."""
    code, out, _ = runner.run(["id", "-un"], TIMEOUT)
    user = out.decode("utf-8", "replace").strip() if code == 0 else ""
    if not user:
        return "", None
    code, out, _ = runner.run(["sacctmgr", "-n", "-P", "show", "assoc", f"user={user}",
                               "format=account"], TIMEOUT)
    return user, parse_accounts(out.decode("utf-8", "replace")) if code == 0 else None


@dataclass
class JobCheck:
    """What the login node tells of a job before it is submitted."""

    problems: list[str] = field(default_factory=list)  # each stops the submission
    notes: list[str] = field(default_factory=list)  # what could not be checked, and why


def check_job(runner: CommandRunner, job: SlurmJob, facts: ClusterFacts) -> JobCheck:
    """The job against the partitions `facts` holds (`ask_slurm`) and the user's accounts."""
    found = JobCheck(fit_problems(job, facts.partitions))
    if job.account:
        user, accounts = user_accounts(runner)
        found.problems += account_problems(job.account, accounts, user)
        if accounts is None:
            found.notes.append(f"The account {job.account!r} cannot be checked before submit "
                               "(Slurm's accounting does not answer `sacctmgr` here): Slurm "
                               "judges it when the job is submitted.")
    return found


def expected_start(runner: CommandRunner, job_id: str) -> str:
    """`squeue --start`: when Slurm expects the pending job to start ("" when unknown)."""
    code, out, _ = runner.run(["squeue", "-h", "--start", "-j", job_id, "-o", "%S"], TIMEOUT)
    text = out.decode("utf-8", "replace").strip() if code == 0 else ""
    return "" if text in ("N/A", "Unknown", "") else text


def cancel(runner: CommandRunner, job_id: str, signal_name: str = "", *,
           full: bool = True) -> None:
    """`scancel` the job (with `--signal=NAME --full`: that signal to every process; not
    `full`: to the processes of its steps only, not its batch script)."""
    argv = ["scancel", job_id] if not signal_name else \
        ["scancel", *(["--full"] if full else []), f"--signal={signal_name}", job_id]
    code, _, err = runner.run(argv, TIMEOUT)
    if code != 0:
        text = err.decode("utf-8", "replace").strip()
        if "already completing or completed" not in text and "Invalid job id" not in text:
            raise SlurmError(f"scancel {job_id} failed: {text}")
