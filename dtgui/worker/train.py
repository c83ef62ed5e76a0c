"""Entry point of one task: ``python -m dtgui_worker.train --plan plan.json --task worker:0
--out output``.

The bundle directory is the one holding plan.json; ``--out`` is relative to the current
directory. Events go to ``<out>/events-<task>.jsonl`` (README, "Events"). Exit codes: 0 done,
1 failed, 143 stopped by SIGTERM (130 by SIGINT).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any

from .events import EventWriter
from .model_file import UserError, one_line

STOP_SIGNALS = {signal.SIGTERM: 143, signal.SIGINT: 130}


def task_slug(task: str) -> str:
    """``worker:0`` -> ``worker-0`` (file names)."""
    return task.replace(":", "-")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="dtgui_worker.train", description=__doc__)
    parser.add_argument("--plan", required=True, help="path to plan.json (schema 1)")
    parser.add_argument("--task", required=True, help='this task, e.g. "worker:0", "chief:0"')
    parser.add_argument("--out", default="output", help="output directory (default: output)")
    return parser.parse_args(argv)


def install_stop_handler(events: EventWriter) -> None:
    """SIGTERM/SIGINT -> a ``log`` event "stopped", then exit at once (143/130).

    The signals are blocked in every thread and taken by a dedicated sigwait thread, so they
    are handled even while the main thread is inside TensorFlow (a collective, server.join()).
    Must run before TensorFlow starts its threads (they inherit the signal mask).
    """
    signals = set(STOP_SIGNALS)
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)

    def wait_for_stop() -> None:
        sig = signal.sigwait(signals)
        try:
            events.log(f"stopped (signal {signal.Signals(sig).name})", level="warning")
            print(f"[{events.task}] stopped by {signal.Signals(sig).name}", flush=True)
            events.close()
        finally:
            os._exit(STOP_SIGNALS.get(signal.Signals(sig), 143))

    threading.Thread(target=wait_for_stop, name="dtgui-stop", daemon=True).start()


def load_plan(path: str) -> dict[str, Any]:
    if not os.path.isfile(path):
        raise UserError(f"plan.json not found: {os.path.abspath(path)}")
    try:
        with open(path, encoding="utf-8") as f:
            plan = json.load(f)
    except json.JSONDecodeError as exc:
        raise UserError(f"plan.json is not valid JSON: {exc}") from exc
    if not isinstance(plan, dict) or plan.get("schema") != 1:
        raise UserError(f"plan.json has schema {plan.get('schema') if isinstance(plan, dict) else '?'}"
                        f"; this worker reads schema 1")
    return plan


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out_dir = os.path.abspath(args.out)
    events = EventWriter(os.path.join(out_dir, f"events-{task_slug(args.task)}.jsonl"),
                         args.task)
    install_stop_handler(events)
    telemetry = None
    stage = "reading the plan"
    try:
        plan = load_plan(args.plan)
        bundle_dir = os.path.dirname(os.path.abspath(args.plan))
        stage = "starting TensorFlow"
        from .telemetry import Telemetry

        telemetry = Telemetry(events).start()
        from . import run  # imports TensorFlow (seconds)

        return run.run_task(plan, bundle_dir, out_dir, args.task, events)
    except UserError as exc:
        _fail(events, exc.message, exc.tb or traceback.format_exc())
        return 1
    except Exception as exc:
        stage = getattr(exc, "dtgui_stage", stage)
        _fail(events, f"Failed while {stage}: {one_line(exc)}", traceback.format_exc())
        return 1
    finally:
        if telemetry is not None:
            telemetry.stop()
        events.close()


def _fail(events: EventWriter, error: str, tb: str) -> None:
    events.emit("failed", error=error, traceback=tb)
    print(f"[{events.task}] FAILED: {error}", flush=True)
    print(tb, file=sys.stderr, flush=True)


def host_name() -> str:
    return socket.gethostname()


def now() -> float:
    return time.time()


if __name__ == "__main__":
    sys.exit(main())
