"""`dtgui resume RUN [--steps N]`: an ended run of the history continued from its newest
checkpoint, on its own machines, in the same run (`dtgui.launch.start.resume.resume_run`), followed
as `dtgui run` follows a run."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dtgui.launch.controller import RunController


def add_resume(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    resume = sub.add_parser(
        "resume", help="continue a stopped, failed or timed-out run (or a finished one, with "
        "more --steps) from its newest checkpoint, on its machines, headless")
    resume.add_argument("run", help="the run: its folder, its name or its id (dtgui's Runs "
                        "page lists them)")
    resume.add_argument("--steps", type=int, default=None,
                        help="the step it trains to (default: its plan's)")


def cmd_resume(args: argparse.Namespace, follow: Callable[[RunController], int]) -> int:
    from dtgui.core.bundles.bundle import primary_tasks
    from dtgui.core.runs.records import RunHistory
    from dtgui.launch.controller import LaunchError
    from dtgui.launch.start.resume import RESUMING_LINE, resume_run

    if args.steps is not None and args.steps < 1:
        print("dtgui resume: --steps must be at least 1", file=sys.stderr)
        return 2
    try:
        record = RunHistory().lookup(args.run)
        print(f"resuming {record.run_name} ({record.bundle})", flush=True)
        controller = resume_run(record, steps=args.steps)
    except (LookupError, OSError, ValueError, LaunchError) as exc:
        text = exc.args[0] if isinstance(exc, LookupError) and exc.args else str(exc)
        print(f"dtgui resume: {text}", file=sys.stderr)
        return 2
    chief = primary_tasks(controller.bundle.plan)[0].task_id
    said = [line for line in controller.metrics.log_lines(chief)
            if line.startswith(RESUMING_LINE)]  # the checkpoint, and newer ones skipped
    if said:
        print(said[-1].removeprefix("[dtgui] "), flush=True)
    return follow(controller)
