"""A profile asked of a running run ("Profile N steps…", `dtgui profile`): the request
travels the way a stop does (written to each machine's output folder, then signalled to the
training tasks), and the answer is read from the tasks' logs (each says the steps it agreed
on, then that its trace is written: dtgui.core.measure.profile_answers)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from dtgui.core.live_run import LiveRun
from dtgui.core.measure.profile_answers import (
    ENDED,
    REFUSED,
    WRITTEN_MESSAGE,
    busy_message,
    busy_steps,
    captured,
    capturing_steps,
    count_refusal,
    profiling_message,
    silent_message,
    unasked_message,
)
from dtgui.core.plans.plan import Plan, profile_refusal
from dtgui.core.runs.run_state import RunState
from dtgui.launch.exec.executor import Executor
from dtgui.remote.parallel import each
from dtgui.worker.layout import TENSORBOARD_NAME
from dtgui.worker.profile_request import MAX_PROFILE_STEPS, PROFILE_SIGNAL, REQUEST_NAME

# How long a profile asked of the running run waits for its tasks: to agree on the steps (a
# call to end, on a loaded machine), then to write their traces
PROFILE_ANSWER_SECONDS = 120.0
log = logging.getLogger(__name__)
ANSWER_POLL_SECONDS = 0.2


class AskedRun(Protocol):
    """What asking a run for a profile reads of it and does to it (`RunController`)."""

    @property
    def finished(self) -> bool: ...

    @property
    def state(self) -> RunState: ...

    @property
    def plan(self) -> Plan: ...

    @property
    def metrics(self) -> LiveRun: ...

    @property
    def executors(self) -> Sequence[Executor]: ...

    @property
    def training_tasks(self) -> list[str]:
        """The tasks that train (the workers, or the ParameterServer coordinator): the ones
        asked, and the ones that answer."""
        ...

    def read_through(self) -> bool:
        """Every machine's files were read to their end at least once."""
        ...

    def signal_tasks(self, sig: int, tasks: set[str]) -> None: ...


def request_profile(run: AskedRun, steps: int, limit: float = PROFILE_ANSWER_SECONDS,
                    said: Callable[[str], None] | None = None) -> str:
    """Ask every training task of `run` to capture TensorFlow's profiler over its next
    `steps` steps; blocks until each wrote its trace. `said` hears "profiling steps A-B..."
    once they agreed. Returns the outcome in a sentence; a refusal (a capture under way
    included: said at once) or a task that does not answer within `limit` s (each wait)
    leaves the run as it was."""
    if run.finished or run.state is not RunState.RUNNING:
        return f"{REFUSED}{ENDED}"
    refusal = profile_refusal(run.plan)
    if refusal:
        return f"{REFUSED}{refusal}"
    too_many = count_refusal(steps, MAX_PROFILE_STEPS)
    if too_many:
        return too_many
    tasks = sorted(run.training_tasks)
    # a run followed again (dtgui profile) is read from its start: an earlier capture's
    # answers are not this one's
    deadline = time.monotonic() + limit
    while not run.read_through() and time.monotonic() < deadline:
        time.sleep(ANSWER_POLL_SECONDS)
    seen = {t: run.metrics.log_lines_since(t, 0)[1] for t in tasks}
    data = f"{steps}\n".encode()
    executors = list(run.executors)
    put = each(lambda ex: ex.put_output_file(REQUEST_NAME, data), executors,
               name="dtgui-profile")
    errors = [f"{ex.name}: {r}" for ex, r in zip(executors, put, strict=True)
              if isinstance(r, Exception)]
    if errors:
        return unasked_message(errors)
    run.signal_tasks(PROFILE_SIGNAL, set(tasks))
    answer = _await_answers(run, tasks, seen, steps, limit, said)
    if answer == WRITTEN_MESSAGE:
        fetch_traces(executors)
    return answer


def fetch_traces(executors: Sequence[Executor]) -> None:
    """Every machine's TensorBoard folder (its tasks' traces) into the local bundle, where
    "Open in TensorBoard" and the bottleneck card read them (the tasks on this machine write
    there already). A machine that cannot give them keeps them in its own copy."""
    got = each(lambda ex: ex.fetch_output(TENSORBOARD_NAME), list(executors),
               name="dtgui-traces")
    for ex, result in zip(executors, got, strict=True):
        if isinstance(result, Exception):
            log.warning("the profiles on %s were not copied here: %s", ex.name, result)


def _await_answers(run: AskedRun, tasks: list[str], seen: dict[str, int], steps: int,
                   limit: float, said: Callable[[str], None] | None) -> str:
    """Wait for every task to say the steps it captures, then that its trace is written; a
    task that declines it (a capture under way) is the answer."""
    spans: dict[str, tuple[int, int]] = {}
    written: set[str] = set()
    deadline = time.monotonic() + limit
    while len(written) < len(tasks):
        if run.finished:
            return f"{REFUSED}{ENDED}"
        for t in tasks:
            lines, seen[t] = run.metrics.log_lines_since(t, seen[t])
            under_way = busy_steps(lines)
            if under_way is not None and t not in spans:
                return busy_message(*under_way)
            span = capturing_steps(lines)
            if span is not None and t not in spans:
                spans[t] = span
                if len(spans) == len(tasks):
                    if said is not None:
                        said(profiling_message(*span, asked=steps))
                    deadline = time.monotonic() + limit
            if t in spans and captured(lines):
                written.add(t)
        if time.monotonic() > deadline:
            if len(spans) < len(tasks):
                return silent_message(set(tasks) - set(spans), "start the capture", limit)
            return silent_message(set(tasks) - written, "write the trace", limit)
        time.sleep(ANSWER_POLL_SECONDS)
    return WRITTEN_MESSAGE
