"""SlurmExecutor: the tasks of a run as one Slurm job, driven by the run policy like any
machine's tasks (`RunController`).

`start` submits the bundle's job.sbatch (`sbatch --parsable`); every task's "pid" is the job
id (kept in the run record, which is how a reattach finds the job). `poll` asks Slurm the
job's state (`squeue`, then `scontrol show job` once it left the queue, `sacct` once Slurm's
controller forgot it) and reads every
task's events, log and exit file from the bundle directory on the shared filesystem:

* while the job waits in the queue, its tasks count as alive and queued (not hung), and the
  first task's log says why it waits and when Slurm expects it to start;
* a task that wrote its exit file has ended with that code;
* once the job has ended, a task without an exit code ended with the job: when the job did
  not complete (cancelled, time limit, node failure), a `failed` event says so in Slurm's
  words ("time limit 00:05:00 reached") and names the last checkpoint a restart resumes
  from, so the run fails with that reason; the batch step's own log is shown too.

`signal(SIGTERM)` is `scancel`, `signal(SIGKILL)` is `scancel --full --signal=KILL`: the job,
every step and every process of it end, and nothing is left in the queue.

Written once over the host layer: Slurm's commands go through `runner` (on the login node),
the run directory's files through `host` (this machine: `LocalHost`; a cluster's login node
over SSH: `RemoteSlurmExecutor`).
"""

from __future__ import annotations

import posixpath
import signal as signals
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from dtgui.core.bundles.bundle import Bundle
from dtgui.core.events import Event
from dtgui.core.plans.plan import TaskSpec
from dtgui.kinds.slurm import remote as slurm
from dtgui.kinds.slurm.answers import JobStatus
from dtgui.kinds.slurm.job import JOB_FILE, SlurmError
from dtgui.launch.exec.executor import Executor, MachinePoll, TaskFiles, TaskPoll
from dtgui.launch.exec.host import (
    CopyProgress,
    Host,
    LocalHost,
    bundle_archive,
    full_output,
)
from dtgui.worker import layout
from dtgui.worker.profile_request import PROFILE_SIGNAL

if TYPE_CHECKING:
    from dtgui.remote.commands import CommandRunner

JOB_LOG_LINES = 20  # lines of the batch step's log shown when the job ends
JOB_LOG_BYTES = 64 * 1024  # the end of the batch step's log read for them


class SlurmExecutor(Executor):
    """The tasks of `bundle` as one Slurm job submitted on the login node `runner` reaches;
    `run_dir`: the bundle directory on the shared filesystem, read through `host` (default
    this machine)."""

    def __init__(self, name: str, bundle: Bundle, tasks: Iterable[TaskSpec],
                 runner: CommandRunner, run_dir: str, host: Host | None = None) -> None:
        super().__init__(name, bundle, tasks)
        self.runner = runner
        self.run_dir = run_dir
        self.host = host or LocalHost(name)
        self.mirrors = self.host.mirrors
        self.status: JobStatus | None = None  # the last look at the job
        self._told = ""  # the queue sentence last written to the log
        self._job_log_shown = False
        self._cause_shown = False  # a task's own failure was shown (see poll)
        self._cancelled = False  # dtgui cancelled the job (Stop): its tasks did not fail
        self._codes: dict[str, int | None] = {}  # the tasks' exit codes at the last poll
        self.checkpoint: tuple[int, str] | None = None  # the last one saved: (step, path)
        self._ran = self._requeued = False  # the job ran; it waits again since (--requeue)

    @property
    def directory(self) -> str:
        return self.run_dir

    def adopt(self, pids: dict[str, int]) -> None:
        super().adopt(pids)
        if self.pids and not self.job_id:
            self.job_id = str(next(iter(self.pids.values())))

    def prepare(self, progress: CopyProgress | None = None) -> None:
        """The bundle in the run directory, with the tasks' output directories (copied as
        one archive and unpacked there when the files are on another machine)."""
        if self.archive is None and self.host.mirrors:
            self.archive = bundle_archive(self.bundle)
        self.host.prepare_dir(self.run_dir, self.archive, make_dir=not self.dir_ready,
                              progress=progress)

    def port_conflicts(self) -> list[str]:
        return []  # the tasks' ports are chosen on the nodes, from the job id

    def full_output(self) -> str:
        return full_output(self.host, self.run_dir)

    def _clear_exit_codes(self) -> None:
        """A resubmission starts with no exit codes."""
        if not self.host.mirrors:
            self.host.prepare_dir(self.run_dir, None)
        self.host.remove(self.run_dir, [layout.exit_file(t.file_stem) for t in self.tasks])

    def start(self) -> dict[str, int]:
        self._clear_exit_codes()
        self.job_id = slurm.submit(self.runner, self.run_dir, JOB_FILE)
        self.status = None
        self._told, self._job_log_shown, self._cause_shown = "", False, False
        self._ran = self._requeued = False
        self._cancelled = False
        self._codes = {}
        self.pids = {t.task_id: int(self.job_id) for t in self.tasks}
        return dict(self.pids)

    def poll(self) -> MachinePoll:
        result = MachinePoll(self.name)
        if not self.job_id:
            for task in self.tasks:
                result.tasks[task.task_id] = TaskPoll(task.task_id, alive=False)
            return result
        status = slurm.status(self.runner, self.job_id)  # liveness first, then the files
        self._requeued |= self._ran and status.queued
        self._ran |= status.state == "RUNNING"
        self.status = status
        notes = self._queue_notes(status)
        result.note = self._told if status.queued else ""
        files = self._read_files()
        for found in files.values():
            for event in found.events:
                if event.kind == "checkpoint":
                    self.checkpoint = (int(event.get("step", 0)), str(event.get("path", "")))
        codes = self._codes = {tid: found.exit_code for tid, found in files.items()}
        # srun ends every task once one fails: the first poll that sees a task's own failure
        # shows the others still running, so that the run fails with that task's error
        cause = any(c is not None and 0 < c <= 128 for c in codes.values())
        hold = cause and not self._cause_shown
        self._cause_shown |= cause
        for i, task in enumerate(self.tasks):
            tid = task.task_id
            poll = TaskPoll(tid)
            code = codes[tid]
            if status.queued:  # waiting (again, once requeued): an earlier attempt's exit
                poll.queued = True  # codes do not count
            elif hold and not (code is not None and 0 < code <= 128):
                pass  # ended by srun because of another task (shown next poll)
            elif code is not None and code > 128 and status.active:
                # stopped by a signal (time limit, its warning, scancel): the job's end says
                # why; till then it waits for the job as a queued task does (not hung)
                poll.queued = True
            elif code is not None:
                poll.alive, poll.exit_code = False, code
            elif status.ended or not status.state:
                poll.alive = False
            found = files[tid]
            poll.raw_events, poll.events = found.raw_events, list(found.events)
            poll.raw_log, poll.log_lines = found.raw_log, list(found.log_lines)
            result.behind |= found.behind
            if i == 0:
                poll.log_lines = notes + poll.log_lines
            failed = not poll.alive and status.ended and status.state != "COMPLETED" and \
                (code is None or not 0 <= code <= 128) and not cause and \
                not self._cancelled  # killed with the job, not by dtgui
            if failed:
                poll.events.append(Event("failed", tid, time.time(),
                                         {"error": self._ended_text(status)}))
            if i == 0 and status.ended and not self._job_log_shown:
                self._job_log_shown = True
                poll.log_lines += self._job_log_tail()
            result.tasks[tid] = poll
        return result

    def _ended_text(self, status: JobStatus) -> str:
        """Why the job ended, and where a restart resumes from."""
        if self.checkpoint is None:
            return f"{status.describe()}; no checkpoint was saved (a restart begins at step 0)"
        step, path = self.checkpoint
        return f"{status.describe()}; the last checkpoint: {path} (step {step})"

    def _queue_notes(self, status: JobStatus) -> list[str]:
        """A log line each time the job's place in the queue changes."""
        if not status.queued:
            return []
        text = status.describe()
        if self._requeued:
            text = f"Slurm requeued the job (a node failed, or it was preempted); {text}"
        if status.state == "PENDING" and status.start in ("", "N/A", "Unknown"):
            start = slurm.expected_start(self.runner, self.job_id)
            if start:
                text += f", expected to start {start}"
        if text == self._told:
            return []
        self._told = text
        return [f"[dtgui] {text}"]

    # -- the files in the run directory -------------------------------------------------
    def _read_files(self) -> dict[str, TaskFiles]:
        """Every task's exit code (None: not written) and the new lines of its files."""
        seen = self.host.read_tasks(self.run_dir, self.task_reads(pgids=False))
        return self.take_files(seen, self.host.max_chunk)

    def _job_log_text(self) -> str:
        return self.host.read_tail(self.run_dir, layout.job_log_file(self.job_id),
                                   JOB_LOG_BYTES).decode("utf-8", "replace")

    def _job_log_tail(self) -> list[str]:
        lines = [line for line in self._job_log_text().splitlines() if line.strip()]
        return [f"[slurm] {line}" for line in lines[-JOB_LOG_LINES:]]

    def _all_exited(self) -> bool:
        """Every task ended by itself (a code over 128 is a signal: the job may run again)."""
        return bool(self._codes) and all(c is not None and c <= 128
                                         for c in self._codes.values())

    def signal(self, *sigs: int, tasks: Iterable[str] | None = None) -> None:
        """The job is one: TERM cancels it, KILL kills every process of it, PROFILE_SIGNAL
        goes to its steps' processes (the tasks; not the batch script); others wait."""
        if not self.job_id or self._all_exited() or (self.status and self.status.ended):
            return  # the job has ended, or ends by itself now that every task has
        if signals.SIGKILL in sigs:
            self._cancelled = True
            slurm.cancel(self.runner, self.job_id, "KILL")
        elif signals.SIGTERM in sigs or signals.SIGINT in sigs:
            self._cancelled = True
            slurm.cancel(self.runner, self.job_id)
        elif PROFILE_SIGNAL in sigs:
            slurm.cancel(self.runner, self.job_id, PROFILE_SIGNAL.name.removeprefix("SIG"),
                         full=False)


    def put_output_file(self, name: str, data: bytes) -> None:
        self.host.write_file(posixpath.join(self.run_dir, layout.OUTPUT_DIR, name), data)

    def read_output_file(self, name: str, limit: int) -> bytes:
        return self.host.read_tail(posixpath.join(self.run_dir, layout.OUTPUT_DIR), name, limit)

    def fetch_output(self, name: str) -> int:
        if not self.host.mirrors:
            return 0  # the run directory is the local bundle's
        return self.host.download_tree(posixpath.join(self.run_dir, layout.OUTPUT_DIR, name),
                                       self.bundle.output / name)

    def close(self) -> None:
        self.host.close()


__all__ = ["SlurmError", "SlurmExecutor"]
