"""A run's tasks: their order, each one's state, and the run's progress as they tell it.

`RunTasks` is filled by the reducer (`dtgui.core.run_curves.RunCurves`) from the events and by
whoever runs the tasks (`LiveRun.set_task_state`: the exits its executors see).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

from dtgui.core.runs.run_state import RunState

TASK_ORDER = {"chief": 0, "worker": 1, "ps": 2, "evaluator": 3}


def task_key(task: str) -> tuple[int, int, str]:
    """Tasks in the order that names the run's main one first: chief, worker:0, worker:1..."""
    kind, _, index = task.partition(":")
    return TASK_ORDER.get(kind, 9), int(index) if index.isdigit() else 0, task


@dataclass
class TaskState:
    task: str
    status: RunState = RunState.STARTING  # starting, running, finished, failed or stopped
    step: int = 0
    replicas: int = 0
    error: str = ""
    exit_code: int | None = None
    machine: str = ""  # where the task runs ("" = this machine)
    straggler: str = ""  # why it is flagged as a straggler ("" = it is not)

    @property
    def exit_shown(self) -> str:
        """Its exit as the views show it: the code, but nothing for a task that ended as a
        stop asked it to (SIGTERM's 143 is dtgui's Stop, which its status says: "stopped"),
        and the signal's name for one killed by another."""
        code = self.exit_code
        if code is None or (self.status == RunState.STOPPED and code in _ASKED_ENDS):
            return ""
        if code > 128 or code < 0:
            number = code - 128 if code > 128 else -code
            try:
                return f"{code} ({signal.Signals(number).name})"
            except ValueError:
                return str(code)
        return str(code)


# The exit codes of a task that stopped as asked: at once, or by the signal the stop sends.
_ASKED_ENDS = frozenset({0, 128 + signal.SIGTERM, -signal.SIGTERM, 128 + signal.SIGINT,
                         -signal.SIGINT})


@dataclass
class RunTasks:
    """Each task's state, the furthest step and epoch any task reached, the last epoch's
    metrics and the models saved."""

    states: dict[str, TaskState] = field(default_factory=dict)
    step: int = 0
    epoch: int = 0
    epoch_metrics: dict[str, float] = field(default_factory=dict)
    models: list[dict[str, object]] = field(default_factory=list)  # model_saved events

    def of(self, task: str) -> TaskState:
        """The task's state, made the first time it is named."""
        state = self.states.get(task)
        if state is None:
            state = self.states[task] = TaskState(task)
        return state

    def machine(self, task: str) -> str:
        state = self.states.get(task)
        return state.machine if state is not None else ""

    def ended(self, task: str) -> bool:
        state = self.states.get(task)
        return state is not None and state.status.ended

    def trained(self, task: str, step: int, epoch: int) -> None:
        """The task trained to `step` (its steps' calls): it runs."""
        state = self.of(task)
        state.step = step
        if state.status is RunState.STARTING:
            state.status = RunState.RUNNING
        self.step = max(self.step, step)
        self.reached_epoch(epoch)

    def moved(self, task: str, step: int | None, epoch: int | None) -> None:
        """A script's numbers said a step or an epoch (only forward)."""
        state = self.of(task)
        if step is not None and step > state.step:
            state.step, self.step = step, max(self.step, step)
        if epoch is not None:
            self.reached_epoch(epoch)

    def reached_epoch(self, epoch: int) -> None:
        self.epoch = max(self.epoch, epoch)

    def started(self, task: str, replicas: int, resumed_at: int | None) -> None:
        """The task (re)started; `resumed_at`: the step its curves were rewound to."""
        state = self.of(task)
        state.status = RunState.RUNNING
        state.replicas = replicas
        if resumed_at is not None:  # the steps after it are trained again
            state.step = resumed_at
            self.step = max(t.step for t in self.states.values())

    def finished(self, task: str) -> None:
        self.of(task).status = RunState.FINISHED

    def failed(self, task: str, error: str) -> None:
        state = self.of(task)
        state.status = RunState.FAILED
        # The first cause wins: a task seen hung (SIGSTOP) and then resumed by the stop's
        # SIGCONT reports a follow-on error ("lost contact") that must not replace it.
        if not state.error:
            state.error = error

    def epoch_ended(self, values: dict[str, object]) -> None:
        """An `epoch` event's numbers (its fields and metrics) become the last epoch's."""
        self.epoch_metrics = {
            k: float(v) for k, v in values.items()
            if k not in ("v", "t", "steps") and isinstance(v, (int, float))
            and not isinstance(v, bool)
        }

    def copy_states(self) -> dict[str, TaskState]:
        """Copies of every task's state (what a snapshot hands to another thread)."""
        return {k: TaskState(**vars(v)) for k, v in self.states.items()}
