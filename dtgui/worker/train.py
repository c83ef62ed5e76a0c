"""Entry point of one task: ``python -m dtgui_worker.train --plan plan.json --task worker:0
--out output``.

The bundle directory is the one holding plan.json; ``--out`` is relative to the current
directory. Events go to ``<out>/events-<task>.jsonl`` (docs/bundle-format.md). Exit codes: 0 done,
1 failed, 143 stopped by SIGTERM (130 by SIGINT, 138 by SIGUSR1: a Slurm job's warning of
its time limit); a stopped task saves a checkpoint at the step it reached first.

The first process (the supervisor, no TensorFlow) runs the training in a child process
(``--child``); see supervisor.py for why.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from .events import EventWriter
from .layout import events_name
from .model_file import UserError, describe_failure
from .netcheck import tpu_precheck
from .plan import Plan, PlanError
from .process_exit import leave
from .profile_request import ProfileRequest
from .stop_request import StopRequest


def task_slug(task: str) -> str:
    """``worker:0`` -> ``worker-0`` (file names)."""
    return task.replace(":", "-")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="dtgui_worker.train",
                                     description="Run one task of a dtgui run bundle.")
    parser.add_argument("--plan", required=True, help="path to plan.json (schema 1)")
    parser.add_argument("--task", required=True, help='this task, e.g. "worker:0", "chief:0"')
    parser.add_argument("--out", default="output", help="output directory (default: output)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def load_plan(path: str) -> Plan:
    """The plan, or a UserError that says what is wrong with plan.json."""
    try:
        plan = Plan.load(path)
    except PlanError as exc:
        raise UserError(str(exc)) from exc
    return plan


def fail(events: EventWriter, error: str, tb: str) -> int:
    events.emit("failed", error=error, traceback=tb)
    print(f"[{events.task}] FAILED: {error}", flush=True)
    if tb:
        print(tb, file=sys.stderr, flush=True)
    return 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out_dir = os.path.abspath(args.out)
    plan_path = os.path.abspath(args.plan)
    events = EventWriter(os.path.join(out_dir, events_name(task_slug(args.task))),
                         args.task)
    try:
        if args.child:
            code = child_main(plan_path, args.task, out_dir, events)
            events.close()
            leave(code)  # everything is written: TensorFlow's teardown is not waited for
        try:  # checks that need no TensorFlow fail here, in a fraction of a second
            plan = load_plan(plan_path)
            if plan.strategy.uses_tpu:  # an absent TPU would hang TensorFlow
                tpu_precheck(plan.tpu_address)
        except UserError as exc:
            return fail(events, exc.message, exc.tb or traceback.format_exc())
        return supervise_task(plan, plan_path, args.task, out_dir, events)
    finally:
        events.close()


def supervise_task(plan: Plan, plan_path: str, task: str, out_dir: str,
                   events: EventWriter) -> int:
    """Run the task's child (the plan's model says which kind) under the supervisor to its
    end; returns this task's exit code."""
    from .supervisor import Child, TrainingChild, supervise

    child: Child
    if plan.script is not None:
        from .script_child import ScriptChild

        child = ScriptChild(plan, plan_path, task, out_dir, events)
    else:
        child = TrainingChild(plan_path, task, out_dir)
    return supervise(child, events)


def child_main(plan_path: str, task: str, out_dir: str, events: EventWriter) -> int:
    """The training process: every exception becomes one ``failed`` event and exit 1."""
    stage = "reading the plan"
    stop = StopRequest().install()  # before TensorFlow: a stop is seen from the first call on
    asked = ProfileRequest(out_dir).install()
    try:
        plan = load_plan(plan_path)
        stage = "starting TensorFlow"
        from . import run  # imports TensorFlow (seconds)

        return run.run_task(plan, os.path.dirname(plan_path), out_dir, task, events, stop,
                            asked)
    except UserError as exc:
        return fail(events, exc.message, exc.tb or traceback.format_exc())
    except BaseException as exc:  # noqa: BLE001 - SystemExit from user code is a failure too
        stage = getattr(exc, "dtgui_stage", stage)
        if isinstance(exc, SystemExit):
            return fail(events, f"Failed while {stage}: something called sys.exit({exc.code})",
                        traceback.format_exc())
        return fail(events, f"Failed while {stage}: {describe_failure(exc)}",
                    traceback.format_exc())


if __name__ == "__main__":
    sys.exit(main())
