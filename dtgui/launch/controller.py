"""The run policy, written once over executors (docs/machines.md).

`RunController` follows one run: a monitor thread polls every machine's executor (each
machine on its own schedule, so an unreachable one never delays the others), feeds events and
log lines into `LiveRun` (mirroring remote files into the local bundle), and applies the
policy:

* a task that exits with an error, dies without a word, is stopped (SIGSTOP: hung), writes no
  event for `stale_seconds`, or whose machine stays unreachable for `unreachable_seconds`
  fails the run: it is marked failed with its last log lines and every other task of every
  machine is stopped (TERM + CONT, then KILL after `stop_grace`) - or, with `max_restarts`,
  every task is restarted from the last checkpoint;
* when every primary task (the training workers, or the ParameterServer coordinator) has
  finished, the servers are stopped and the run is finished;
* tasks ended by the signal of another dtgui process following the same run (`dtgui run`
  and the app's reattach) do not fail it: that process's end (stopped, finished, failed),
  written on every machine before it signals (dtgui.launch.runs.asked_end), is followed;
* `request_stop()` stops every task on every machine: each saves a checkpoint at the step it
  reached and ends (SIGKILL after `save_grace`); a ParameterServer's servers serve until
  the coordinator has saved. `detach()` only stops watching (the tasks keep running;
  `dtgui.launch.start.pipeline.reattach` follows them again).

Nothing here blocks the caller: `request_stop()` and `detach()` only set flags.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures

from dtgui.core.bundles.bundle import Bundle, primary_tasks
from dtgui.core.events import STEP_KINDS
from dtgui.core.live_run import LiveRun
from dtgui.core.measure.stragglers import describe_straggler, find_stragglers
from dtgui.core.runs.records import RunRecord
from dtgui.core.runs.run_state import RunState
from dtgui.launch.drivers import local_executor
from dtgui.launch.exec.executor import Executor, MachinePoll, mirror
from dtgui.launch.runs.asked_end import asked_end, clear_end, ended_by_signal, write_end
from dtgui.launch.runs.full_disk import full_disk, full_disk_message
from dtgui.launch.runs.policy import RunPolicy, exit_text, reap_later
from dtgui.launch.runs.profile_ask import (
    PROFILE_ANSWER_SECONDS,
    fetch_traces,
    request_profile,
)
from dtgui.launch.runs.run_source import BundledRun
from dtgui.launch.trackers.hparams import write_hparams
from dtgui.launch.trackers.mlflow_runs import RunTracker, tracker_for
from dtgui.remote.parallel import each, each_value

log = logging.getLogger(__name__)
POLL_SECONDS = 0.2
# A run followed but not shown (the app follows many): its machines are polled at most this
# often, so that the app's CPU grows with what it shows; a failure is still acted on within it.
UNSEEN_POLL_SECONDS = 1.0
MODEL_OUTPUT = "model"  # output/model: the trained model the chief saves
STRAGGLER_SECONDS = 2.0
# Following an end another dtgui process asked: how long past its own graces (the training
# tasks' save, then the servers') it is given to end the tasks before this one ends them
FOLLOW_MARGIN_SECONDS = 30.0
USER_STOP = "stopped by the user"  # a stopped run's message when nothing else asked it
LOG_TAIL_LINES = 3
# events that say a task trains (its steps, or a script's numbers and progress): its machine
# is polled at the training rate from then on
TRAINING_KINDS = (*STEP_KINDS, "scalar", "progress")


class LaunchError(RuntimeError):
    """The run could not start; the message says why and what to do."""


class RunController(BundledRun):
    def __init__(self, bundle: Bundle, metrics: LiveRun | None = None,
                 python: str | None = None, *, executors: list[Executor] | None = None,
                 record: RunRecord | None = None, policy: RunPolicy | None = None) -> None:
        self.bundle = bundle
        self.metrics = metrics or LiveRun(bundle.plan.steps,
                                          cpu_only=bundle.plan.device_kind == "cpu")
        self.python = python or sys.executable
        self.executors = executors or [local_executor(bundle, self.python)]
        self.record = record
        self.policy = policy or RunPolicy()
        if record is not None:  # a reattach (or the watcher) applies the same policy
            record.max_restarts = self.policy.max_restarts
        # ready | running | finished | failed | stopped | detached; written only by the thread
        # that owns the run (the caller of start/attach, then the monitor thread)
        self._state = RunState.READY
        self._message = ""
        self.restarts = 0
        self.tracker: RunTracker | None = None  # MLflow (trackers.mlflow_runs), when on
        self.launch_timings: dict[str, float] = {}  # seconds per launch step (pipeline.STEPS)
        plan = bundle.plan
        self._exec_of = {tid: ex for ex in self.executors for tid in ex.task_ids}
        self._primaries = {t.task_id for t in primary_tasks(plan)}
        self._machine_of = {t.task_id: t.machine_name for t in plan.tasks}
        if plan.machines or plan.is_multi_machine:
            for tid, machine in self._machine_of.items():
                self.metrics.set_task_machine(tid, machine)
        self._stop_requested = threading.Event()
        self._stop_reason = USER_STOP
        self._detach_requested = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=2 * len(self.executors) + 2,
                                        thread_name_prefix="dtgui-run")
        self._inflight: dict[str, Future[MachinePoll]] = {}
        self._polled_at: dict[str, float] = {}
        self._behind: set[str] = set()  # machines with more to read than their last poll took
        self._read_through: set[str] = set()  # machines read to the end at least once
        self._poll_floor = 0.0  # the least interval between polls (UNSEEN_POLL_SECONDS: unseen)
        self._notes: dict[str, str] = {}  # machine -> its note (MachinePoll.note)
        self._reset_watch()

    def _reset_watch(self) -> None:
        now = time.monotonic()
        self._hung: set[str] = set()
        self._stepping: set[str] = set()  # tasks that reported training (polled more often)
        self._ended: dict[str, int | None] = {}
        self._last_event = {tid: now for tid in self._exec_of}
        self._unreachable: dict[str, str] = {}  # machine -> why its last poll failed
        self._answered = {ex.name: now for ex in self.executors}  # last answer (monotonic)
        self._stragglers_at = now

    # -- public API ------------------------------------------------------------------------
    def start(self, check_ports: bool = True) -> None:
        """Check ports, start every task on every machine (in parallel), then watch."""
        followed = {tid for ex in self.executors for tid in ex.task_ids}
        if any(t.task_id not in followed for t in self.bundle.plan.tasks):
            raise LaunchError("This bundle's tasks run on other machines: start it from the app, "
                              "or run `bash run.sh MACHINE` on each machine (see its README).")
        checked = each_value(lambda ex: ex.port_conflicts(), self.executors if check_ports else [],
                             name="dtgui-ports")
        problems = [p for found in checked for p in found]
        if problems:
            raise LaunchError(" ".join(problems))
        self._start_all()
        self._state = RunState.RUNNING
        self._track()
        self._save_record(RunState.RUNNING)
        self._spawn()

    def follow_closely(self, closely: bool) -> None:
        """Shown: the machines polled as often as their executors say; followed unseen: at
        most every UNSEEN_POLL_SECONDS."""
        self._poll_floor = 0.0 if closely else UNSEEN_POLL_SECONDS

    def attach(self) -> None:
        """Watch tasks that were started earlier (their pids adopted by the executors); every
        file is read again from its start."""
        tasks = {t.task_id: t for t in self.bundle.plan.tasks}
        for ex in self.executors:
            ex.reset_offsets()
            if ex.mirrors:  # the local copies are written again from the start
                for tid in ex.task_ids:
                    for path in (self.bundle.events_file(tasks[tid]),
                                 self.bundle.log_file(tasks[tid])):
                        path.parent.mkdir(parents=True, exist_ok=True)
                        path.write_bytes(b"")
        self._state = RunState.RUNNING
        self._track()
        self._spawn()

    def _track(self) -> None:
        """Send the run to MLflow when that is asked for (a record keeps where it went)."""
        self.tracker = tracker_for(self.bundle, self.record)
        if self.tracker is not None:
            if self.record is not None and not self.record.mlflow_uri:
                self.record.mlflow_uri = self.tracker.writer.uri
            self.tracker.begin()

    @property
    def message(self) -> str:
        """What the run says now; while MLflow writes wait or are refused, that too."""
        note = self.tracker.note if self.tracker is not None else ""
        if not note:
            return self._message
        return f"{self._message} · {note}" if self._message else note

    @message.setter
    def message(self, text: str) -> None:
        self._message = text

    @property
    def state(self) -> RunState:
        state = self._state
        return RunState.STOPPING if state is RunState.RUNNING and self._stop_requested.is_set() \
            else state

    def request_stop(self, reason: str = USER_STOP) -> None:
        """Ask the monitor thread to end every task on every machine (returns at once);
        `reason`: what the run's record says stopped it (a sweep's pruner, or the user)."""
        self._stop_reason = reason
        self._stop_requested.set()

    def request_profile(self, steps: int, limit: float = PROFILE_ANSWER_SECONDS,
                        said: Callable[[str], None] | None = None) -> str:
        """Ask every training task for a profile of its next `steps` steps and wait for the
        answer (dtgui.launch.runs.profile_ask)."""
        return request_profile(self, steps, limit, said)

    # what asking for a profile reads of the run and does to it (profile_ask.AskedRun)
    @property
    def training_tasks(self) -> list[str]:
        return sorted(self._primaries)

    def read_through(self) -> bool:
        return {ex.name for ex in self.executors} <= self._read_through

    def signal_tasks(self, sig: int, tasks: set[str]) -> None:
        self._signal_all(sig, tasks=tasks)

    def detach(self, timeout: float = 10.0) -> None:
        """Stop watching and close the connections; the tasks keep running."""
        self._detach_requested.set()
        if self._thread is not None:
            self._thread.join(timeout)
        for ex in self.executors:
            with contextlib.suppress(Exception):
                ex.close()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    # read by the UI (dtgui.launch.runs.run_source.RunSource)
    @property
    def max_restarts(self) -> int:
        return self.policy.max_restarts

    def pgids(self) -> list[int]:
        """Process groups of this machine's tasks."""
        return [p for ex in self.executors for p in ex.local_pgids()]

    # -- starting --------------------------------------------------------------------------
    def _start_all(self) -> None:
        for tid in self._exec_of:
            self.metrics.set_task_state(tid, "starting")
        clear_end(self.executors)
        started = each(lambda ex: ex.start(), self.executors, name="dtgui-start")
        errors = [f"{ex.name}: {result}" for ex, result in zip(self.executors, started, strict=True)
                  if isinstance(result, Exception)]  # every machine's reason is reported
        if errors:
            self._signal_all(signal.SIGKILL)
            raise LaunchError("Could not start the tasks: " + " ".join(errors))
        if self.record is not None:
            for ex in self.executors:
                identities = {} if ex.job_id else ex.identities()
                for tid, pid in ex.pids.items():  # a scheduler's executor holds its job's id
                    if ex.job_id:
                        self.record.set_started(tid, ex.name, job_id=ex.job_id)
                    else:
                        self.record.set_started(tid, ex.name, pid=pid,
                                                started=identities.get(tid, ""))
                machine = self.record.machine(ex.name)
                if machine is not None and ex.job_id:
                    machine.job_id = ex.job_id

    def _spawn(self) -> None:
        self._thread = threading.Thread(target=self._monitor, name="run-monitor", daemon=True)
        self._thread.start()

    # -- the monitor loop ------------------------------------------------------------------
    def _monitor(self) -> None:
        try:
            while not self._detach_requested.is_set():
                self._poll_round()
                if self._stop_requested.is_set():
                    self._stop_all(RunState.STOPPED, self._stop_reason)
                    return
                failures = self._failures()
                asked = self._asked_end(failures)
                if asked is not None:
                    self._follow_end(*asked)
                    return
                if failures:
                    full = full_disk({self._exec_of[tid] for tid, _, _ in failures
                                      if tid in self._exec_of}, self._unreachable)
                    if full is not None:  # a restart would fail the same way
                        self._fail_full(full, failures)
                        return
                    if self.restarts < self.policy.max_restarts:
                        self._restart(failures)
                        continue
                    self._fail(failures)
                    return
                if self._primaries and all(t in self._ended and self._exit_code(t) == 0
                                           for t in self._primaries):
                    for tid in self._primaries:
                        self.metrics.set_task_state(tid, "finished", exit_code=0)
                    self._stop_all(RunState.FINISHED, self._finished_message())
                    return
                self._check_stragglers()
                if self.tracker is not None:
                    self.tracker.update(self.metrics)
                if not self._behind:
                    time.sleep(POLL_SECONDS)
            self._state = RunState.DETACHED
            if self.tracker is not None:
                self.tracker.close(self.metrics)
        except Exception as exc:  # a bug must not leave the run unwatched and unstopped
            log.exception("the run monitor failed")
            with contextlib.suppress(Exception):
                self._stop_all(RunState.FAILED, f"dtgui's run monitor failed: {exc}")
        finally:
            if not self._detach_requested.is_set():
                for ex in self.executors:  # the run is over: no connection is needed
                    with contextlib.suppress(Exception):
                        ex.close()
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._done.set()

    def _poll_round(self, wait: float = 0.3) -> None:
        now = time.monotonic()
        for ex in self.executors:
            if any(t in self._stepping for t in ex.task_ids):
                interval = ex.poll_seconds
            else:
                interval = ex.start_poll_seconds
            interval = max(interval, self._poll_floor)
            if ex.name in self._behind:
                interval = 0.0  # catching up (a reattach reads the whole run)
            if ex.name not in self._inflight and \
                    now - self._polled_at.get(ex.name, 0.0) >= interval:
                self._polled_at[ex.name] = now
                self._inflight[ex.name] = self._pool.submit(ex.poll)
        if self._inflight:
            wait_futures(list(self._inflight.values()), timeout=wait)
        for name, fut in list(self._inflight.items()):
            if fut.done():
                del self._inflight[name]
                self._apply_result(name, fut)

    def _apply_result(self, name: str, fut: Future[MachinePoll]) -> None:
        try:
            self._apply(fut.result())
        except Exception as exc:  # noqa: BLE001 - counts as unreachable
            self._apply(MachinePoll(name, error=str(exc) or type(exc).__name__))

    def _read_to_the_end(self, seconds: float = 15.0) -> None:
        """Read what the tasks wrote last (a failure's traceback, the last steps) before the
        run is said over or a failure is put in words: every machine that answers is polled
        once more, after the polls under way, and again while it has more to read. (The
        regular rounds may not come back in time once the tasks have ended.)"""
        deadline = time.monotonic() + seconds
        machines = [ex for ex in self.executors if ex.name not in self._unreachable]
        for ex in machines:
            running = self._inflight.pop(ex.name, None)
            if running is not None:
                wait_futures([running], timeout=max(0.0, deadline - time.monotonic()))
                if not running.done():
                    self._inflight[ex.name] = running
                    continue
                self._apply_result(ex.name, running)
        while machines and time.monotonic() < deadline:
            polls = {ex.name: self._pool.submit(ex.poll) for ex in machines
                     if ex.name not in self._inflight}
            wait_futures(list(polls.values()), timeout=max(0.0, deadline - time.monotonic()))
            for name, fut in polls.items():
                if fut.done():
                    self._apply_result(name, fut)
                else:
                    self._inflight[name] = fut
            machines = [ex for ex in machines if ex.name in self._behind
                        and ex.name not in self._inflight]

    def _apply(self, mp: MachinePoll) -> None:
        now = time.monotonic()
        if mp.behind:
            self._behind.add(mp.machine)
        else:
            self._behind.discard(mp.machine)
        if mp.error:
            self._unreachable[mp.machine] = mp.error
            return
        self._unreachable.pop(mp.machine, None)
        self._answered[mp.machine] = now
        self._note(mp.machine, mp.note)
        ex = next(e for e in self.executors if e.name == mp.machine)
        tasks = {t.task_id: t for t in self.bundle.plan.tasks}
        for tid, tp in mp.tasks.items():
            if ex.mirrors:
                mirror(self.bundle, tasks[tid], tp.raw_events, tp.raw_log)
            if tp.events or tp.queued:  # a task waiting in a queue is not hung
                self.metrics.add_events(tp.events)
                self._last_event[tid] = now
                if any(e.kind in TRAINING_KINDS for e in tp.events):
                    self._stepping.add(tid)
            if tp.log_lines:
                self.metrics.add_log_lines(tid, tp.log_lines)
            if tid in ex.pids and not tp.alive and tid not in self._ended:
                self._ended[tid] = tp.exit_code
            if tp.stopped:
                self._hung.add(tid)
        if not mp.behind:  # once its lines are in the metrics: what a reader takes as read
            self._read_through.add(mp.machine)

    def _note(self, machine: str, note: str) -> None:
        """A machine's note is the run's message while it lasts (the run's view shows why a
        queued job waits)."""
        old = self._notes.get(machine, "")
        if note != old:
            self._notes[machine] = note
            if note or self._message == old:
                self._message = note

    @property
    def final_loss(self) -> float | None:
        """The run's final loss so far (RunCurves.final_loss: the one definition)."""
        return self.metrics.final_loss()

    # -- the policy ------------------------------------------------------------------------
    def _exit_code(self, tid: str) -> int | None:
        """The task's exit code, or what its last event says when the code is unknown."""
        code = self._ended.get(tid)
        if code is not None:
            return code
        status = self.metrics.snapshot().tasks.get(tid)
        return {"finished": 0, "failed": 1}.get(status.status if status else "")

    def _failures(self) -> list[tuple[str, str, int | None]]:
        """(task, reason, exit code) of every task that fails the run now."""
        now = time.monotonic()
        out = []
        for tid in self._exec_of:
            if tid in self._ended:
                code = self._exit_code(tid)
                if code == 0 and tid in self._primaries:
                    continue
                out.append((tid, exit_text(code, tid in self._primaries), code))
            elif tid in self._hung:
                out.append((tid, "hung: a process of it is stopped (SIGSTOP) and never "
                                 "continues by itself; it was killed", None))
            elif now - self._last_event[tid] > self.policy.stale_seconds:
                out.append((tid, f"hung: no event for {self.policy.stale_seconds:g} s; it was "
                                 "killed", None))
        for machine, answered in self._answered.items():
            silent = now - answered  # a poll may still be waiting: silence is what counts
            if silent >= self.policy.unreachable_seconds:
                error = self._unreachable.get(machine, f"no answer for {silent:.0f} s")
                self._unreachable.setdefault(machine, error)
                out += [(tid, f"its machine {machine} is unreachable ({error})", None)
                        for tid, ex in self._exec_of.items()
                        if ex.name == machine and tid not in self._ended]
        status = self.metrics.snapshot().tasks
        # the cause first: a task that died or hung before one that reported a failure
        out.sort(key=lambda f: (status.get(f[0]) is not None and status[f[0]].error != "",))
        first: dict[str, tuple[str, str, int | None]] = {}
        for failure in out:  # one reason a task: its first
            first.setdefault(failure[0], failure)
        return list(first.values())

    def _finished_message(self) -> str:
        servers = sorted(set(self._exec_of) - self._primaries)
        if not servers:
            return "all tasks finished"
        return (f"training finished; the servers ({', '.join(servers)}) were ended after it, "
                "as they serve until then")

    def _asked_end(self, failures: list[tuple[str, str, int | None]]
                   ) -> tuple[RunState, str] | None:
        """The end another dtgui process asked of the run, when the tasks that would fail it
        now all ended by a signal (its TERM, then KILL): the policy's verdict is then that
        process's, not "stopped from outside"."""
        if not failures or any(tid not in self._ended or not ended_by_signal(code)
                               for tid, _, code in failures):
            return None
        return asked_end(self._exec_of[failures[0][0]])

    def _follow_end(self, state: RunState, message: str) -> None:
        """Another dtgui process ends the run: its tasks are given the time that process
        gives them (a checkpoint saved, then the servers ended; a second signal from here
        would cut the save short), then what is left is ended from here, and the run is
        recorded ending as that process said."""
        if state is RunState.STOPPED:
            self._stop_reason = message
            self._stop_requested.set()  # shown as stopping meanwhile
        policy = self.policy
        self._wait_ended(policy.save_grace + 2 * policy.stop_grace + FOLLOW_MARGIN_SECONDS)
        if state is RunState.FINISHED:
            for tid in self._primaries:
                if tid in self._ended and self._exit_code(tid) == 0:
                    self.metrics.set_task_state(tid, "finished", exit_code=0)
        self._message = message
        self._stop_all(state, message, asked=False)

    def _error_text(self, tid: str, reason: str) -> str:
        state = self.metrics.snapshot().tasks.get(tid)
        error = state.error if state is not None and state.error else reason
        tail = [line for line in self.metrics.log_lines(tid) if line.strip()][-LOG_TAIL_LINES:]
        return error + (" — last log lines: " + " | ".join(tail) if tail else "")

    def _fail(self, failures: list[tuple[str, str, int | None]]) -> None:
        self._read_to_the_end()  # the failed task's last lines, quoted in its error
        first = failures[0][0]
        for tid, reason, code in failures:
            self.metrics.set_task_state(tid, "failed", exit_code=code,
                                        error=self._error_text(tid, reason))
        state = self.metrics.snapshot().tasks[first]
        where = f" on {self._machine_of[first]}" if self.bundle.plan.is_multi_machine else ""
        self._message = f"{first}{where} failed: {state.error}"
        self._stop_all(RunState.FAILED, self._message)

    def _fail_full(self, full: tuple[str, str],
                   failures: list[tuple[str, str, int | None]]) -> None:
        """The run stops with its disk full (dtgui.launch.runs.full_disk)."""
        machine, output = full
        self._read_to_the_end()
        self._message = full_disk_message(
            machine, output, multi_machine=self.bundle.plan.is_multi_machine,
            step=self.metrics.snapshot().step, local_output=self.bundle.output,
            mirrored=self._exec_of[failures[0][0]].mirrors)
        for tid, _, code in failures:
            self.metrics.set_task_state(tid, "failed", exit_code=code, error=self._message)
        self._stop_all(RunState.FAILED, self._message)

    def _restart(self, failures: list[tuple[str, str, int | None]]) -> None:
        self.restarts += 1
        tid, reason, _ = failures[0]
        state = self.metrics.snapshot().tasks.get(tid)
        if state is not None and state.error:  # the task's own words, as when the run fails
            reason = state.error
        note = (f"{tid} failed ({reason}): restarting every task from the last checkpoint "
                f"(restart {self.restarts} of {self.policy.max_restarts})")
        self.metrics.add_log_lines(tid, [f"[dtgui] {note}"])
        self._message = note
        self._end_tasks()
        chief = next((t for t in self.bundle.plan.tasks if t.task_id in self._primaries), None)
        source = self._exec_of.get(chief.task_id) if chief is not None else None
        if source is not None and self.bundle.plan.strategy.collective_across_workers:
            for ex in self.executors:
                ex.sync_checkpoints_from(source)
        self._reset_watch()
        self._start_all()
        if self.record is not None:
            self.record.restarts = self.restarts
        self._save_record(RunState.RUNNING)

    def _check_stragglers(self) -> None:
        now = time.monotonic()
        if now - self._stragglers_at < STRAGGLER_SECONDS:
            return
        self._stragglers_at = now
        found = find_stragglers(self.metrics.throughput_series())
        self.metrics.set_stragglers({t: describe_straggler(t, f, self._machine_of.get(t, ""))
                                     for t, f in found.items()})
        if found and self.state is RunState.RUNNING:
            self._message = "; ".join(describe_straggler(t, f, self._machine_of.get(t, ""))
                                     for t, f in found.items())

    # -- stopping --------------------------------------------------------------------------
    def _signal_all(self, *sigs: int, tasks: set[str] | None = None) -> None:
        """Signal every machine's tasks (of `tasks`) at once (unreachable machines: see
        _reap_later)."""
        futures = [self._pool.submit(ex.signal, *sigs, tasks=[t for t in ex.task_ids
                                                               if tasks is None or t in tasks])
                   for ex in self.executors if ex.name not in self._unreachable
                   and (tasks is None or any(t in tasks for t in ex.task_ids))]
        wait_futures(futures, timeout=15)
        for fut in futures:
            if fut.done() and fut.exception() is not None:
                log.warning("signal %s failed: %s", sigs, fut.exception())

    def _all_ended(self, tasks: set[str] | None = None) -> bool:
        """Every task (of `tasks`) has ended, or cannot be asked (never started; machine
        unreachable)."""
        return all(tid in self._ended or tid not in ex.pids or ex.name in self._unreachable
                   for tid, ex in self._exec_of.items() if tasks is None or tid in tasks)

    def _wait_ended(self, seconds: float, tasks: set[str] | None = None) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._poll_round(wait=0.5)
            if self._all_ended(tasks):
                return True
            time.sleep(0.05)
        return self._all_ended(tasks)

    def _end_tasks(self, grace: float | None = None) -> None:
        """TERM (and CONT) every task, KILL what is left after the grace, then make sure.

        Asked to stop, a training task saves a checkpoint at the step it reached; a server
        (ParameterServer's workers and ps) serves on until asked again, as the coordinator's
        checkpoint reads its variables: it is asked again once the training tasks ended."""
        grace = self.policy.stop_grace if grace is None else grace
        if self._all_ended():  # nothing left to end (another dtgui process ended them)
            for ex in self.executors:
                ex.reap()
            return
        # SIGCONT too: a stopped (SIGSTOP) task acts on SIGTERM only once it runs again
        self._signal_all(signal.SIGTERM, signal.SIGCONT)
        servers = set(self._exec_of) - self._primaries if self._primaries else set()
        ended = self._wait_ended(grace, set(self._exec_of) - servers)
        if servers and ended:
            self._signal_all(signal.SIGTERM, tasks=servers)
            ended = self._wait_ended(self.policy.stop_grace)
        if not ended:
            self._signal_all(signal.SIGKILL)
            self._wait_ended(5.0)
        for ex in self.executors:
            ex.reap()

    def _stop_all(self, final_state: RunState, message: str, asked: bool = True) -> None:
        """End every task and record the run's end; `asked`: this process asks that end
        (it is told on every machine first, `asked_end`), not another's it follows."""
        if asked:
            write_end([ex for ex in self.executors if ex.name not in self._unreachable],
                      final_state, message)
        self._end_tasks(self.policy.save_grace if final_state is RunState.STOPPED else None)
        self._read_to_the_end()
        self._fetch_model()
        if self.bundle.plan.profiled:  # the plan's profile steps: every task's trace here
            fetch_traces([ex for ex in self.executors if ex.name not in self._unreachable])
        for tid in self._exec_of:
            code = self._ended.get(tid)
            self.metrics.set_task_state(tid, "stopped", exit_code=code)
        left = [t for t in self._exec_of if t not in self._ended and t in self._exec_of[t].pids]
        self._state = final_state
        if final_state is not RunState.FAILED or not self._message:
            self._message = message
        if left:
            self._message += (f" (could not confirm that {', '.join(left)} ended: their "
                             "machine did not answer; dtgui keeps trying to stop them for "
                             f"{self.policy.reap_seconds:g} s)")
            reap_later([ex for ex in self.executors if ex.name in self._unreachable],
                       self.policy.reap_seconds)
        self._save_record(final_state)
        self._finish_outputs(final_state)

    def _finish_outputs(self, state: RunState) -> None:
        """The run's HParams summary for TensorBoard; its end in MLflow (queued)."""
        try:
            write_hparams(self.bundle, self.metrics, state)
        except (OSError, ValueError) as exc:
            log.warning("could not write the run's HParams summary: %s", exc)
        if self.tracker is not None:
            self.tracker.finish(self.metrics, state, self._message)

    def _fetch_model(self) -> None:
        """The trained model (written by the chief) into the local bundle: a run on other
        machines gives its model back here."""
        chief = next(iter(primary_tasks(self.bundle.plan)), None)
        if chief is None or chief.task_id not in self._exec_of:
            return
        executor = self._exec_of[chief.task_id]
        if executor.name in self._unreachable:
            return
        try:
            executor.fetch_output(MODEL_OUTPUT)
        except Exception as exc:  # noqa: BLE001 - the run's end must still be recorded
            log.warning("copying the trained model from %s failed: %s", executor.name, exc)
            self.metrics.add_log_lines(chief.task_id, [
                f"[dtgui] the trained model could not be copied from {executor.name}: {exc}"])

    def _save_record(self, state: RunState) -> None:
        if self.record is None:
            return
        if state is RunState.FAILED:
            recorded = self.record.recorded_end()
            if recorded is not None:  # another dtgui process saw this run end well: it did
                state, self._message = recorded
                self._state = state
        if state.ended:
            self.record.end(state, self._message, self.final_loss,
                            self.metrics.snapshot().step)
        else:
            self.record.state = state
        try:
            self.record.save()
        except OSError as exc:
            log.warning("could not save the run record: %s", exc)
