"""`dtgui profile RUN --steps N`: TensorFlow's profiler on every task of a running run over its
next N steps (`RunController.request_profile`), from a second process: the run is followed
again (`dtgui.launch.start.pipeline.reattach`) for as long as the capture takes, then left to
whatever follows it (the app, `dtgui run`, the watcher)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path


def add_profile(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from dtgui.launch.runs.profile_ask import PROFILE_ANSWER_SECONDS
    from dtgui.worker.profile_request import MAX_PROFILE_STEPS

    profile = sub.add_parser(
        "profile", help="capture TensorFlow's profiler on every task of a running run over "
        "its next N steps (output/tensorboard/<task>/plugins/profile)")
    profile.add_argument("run", help="the run: its folder, its name or its id (dtgui's Runs "
                         "page lists them)")
    profile.add_argument("--steps", type=int, default=20,
                         help=f"how many steps (1-{MAX_PROFILE_STEPS}; default 20)")
    profile.add_argument("--limit", type=float, default=PROFILE_ANSWER_SECONDS,
                         metavar="SECONDS", help="how long every task has to start the "
                         "capture, then to write its trace (default "
                         f"{PROFILE_ANSWER_SECONDS:g})")


def cmd_profile(args: argparse.Namespace) -> int:
    """0: the traces written; 2: refused (a bad count, an ended run, a user's script, a
    capture under way), the reason said; 1: a task that did not answer or a machine not
    reached."""
    from dtgui.core.measure.profile_answers import (
        ENDED,
        REFUSED,
        WRITTEN_MESSAGE,
        count_refusal,
        failed,
    )
    from dtgui.core.runs.records import RunHistory
    from dtgui.core.runs.run_state import RunState
    from dtgui.launch.controller import LaunchError
    from dtgui.launch.start.pipeline import reattach
    from dtgui.worker.profile_request import MAX_PROFILE_STEPS

    too_many = count_refusal(args.steps, MAX_PROFILE_STEPS)
    if too_many:  # before the run is looked up: nothing is sent
        print(f"dtgui profile: {too_many}", file=sys.stderr)
        return 2
    try:
        record = RunHistory().lookup(args.run)
        if record.state is not RunState.RUNNING:
            print(f"dtgui profile: {REFUSED}{ENDED} ({record.state})", file=sys.stderr)
            return 2
        controller = reattach(record)
    except (LookupError, OSError, ValueError, LaunchError) as exc:
        text = exc.args[0] if isinstance(exc, LookupError) and exc.args else str(exc)
        print(f"dtgui profile: {text}", file=sys.stderr)
        return 2
    try:
        answer = controller.request_profile(args.steps, args.limit, said=lambda text: print(text,
                                                                              flush=True))
    finally:
        controller.detach()
    if answer != WRITTEN_MESSAGE:
        print(f"dtgui profile: {answer}", file=sys.stderr)
        return 1 if failed(answer) else 2
    traces = (Path(record.bundle) / "output" / "tensorboard").resolve()
    print(f"{WRITTEN_MESSAGE}: {traces}")
    print(f"read it in TensorBoard's Profile tab: tensorboard --logdir {shlex.quote(str(traces))}"
          " (the dtgui[profile] extra)")
    return 0
