"""`dtgui queue`: the runs waiting for their GPUs or machines ("Launch when free" in the
wizard, `dtgui queue add BUNDLE`), in order, with what each waits for; `add` queues an
exported bundle, `cancel`, `up` and `down` change the queue (a run named by its id or its
name, as the list prints them)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dtgui.core.runs.queue_file import QueueError


def add_queue(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    queue = sub.add_parser(
        "queue", help="the runs waiting for free GPUs or machines: list, add, cancel, reorder",
        description="Runs launched with 'Launch when free', or added with 'dtgui queue add "
        "BUNDLE', wait here until their GPUs and machines are free (no other run of dtgui "
        "on them, however it was started), then start in the background (also while dtgui "
        "is closed). With no action: each queued run with its position, id, name and what it "
        "waits for; a run that could not start says why.")
    queue.add_argument("action", nargs="?", choices=("list", "add", "cancel", "up", "down"),
                       default="list", help="add: queue an exported bundle (dtgui export); "
                       "up/down: move the run one place")
    queue.add_argument("id", nargs="?", default="",
                       help="the queued run's id or name (see the list); for add, the bundle")
    queue.add_argument("--max-restarts", type=int, default=0, metavar="N",
                       help="add: restart the run from its last checkpoint up to N times")


def queue_bundle(bundle: Path, max_restarts: int = 0) -> int:
    """Queue an exported bundle and say where it stands (`dtgui queue add`, `dtgui run
    --when-free`)."""
    from dtgui.launch.queue.run_queue import enqueue_bundle
    from dtgui.launch.queue.run_queue_process import noted

    try:
        queued = noted(enqueue_bundle(bundle, max_restarts=max_restarts))
    except QueueError as exc:
        print(f"dtgui queue: {exc}", file=sys.stderr)
        return 2
    print(f"queued as {queued.entry.id} ({queued.entry.name}), position {queued.position}: "
          f"waits for {queued.text}")
    print("dtgui queue lists the queue; dtgui runs shows the run once it started.")
    return 0


def cmd_queue(args: argparse.Namespace) -> int:
    from dtgui.launch.queue.run_queue import (
        cancel_queued,
        move_queued,
        queue_pid,
        queued_runs,
        resume_queue,
    )

    if args.action == "add":
        if not args.id:
            print("dtgui queue add: give the bundle's directory (dtgui export writes one).",
                  file=sys.stderr)
            return 2
        return queue_bundle(Path(args.id), args.max_restarts)
    try:
        if args.action != "list":
            if not args.id:
                print(f"dtgui queue {args.action}: give the queued run's id or name (dtgui "
                      "queue lists them).", file=sys.stderr)
                return 2
            if args.action == "cancel":
                cancelled = cancel_queued(args.id)
                print(f"{cancelled.name} ({cancelled.id}): "
                      + ("cancelled: it is stopped as soon as its launch ends"
                         if cancelled.launching else "cancelled"))
            else:
                move_queued(args.id, -1 if args.action == "up" else 1)
        resume_queue()
        runs = queued_runs()
    except QueueError as exc:
        print(f"dtgui queue: {exc}", file=sys.stderr)
        return 2
    if not runs:
        print("No run is queued.")
        return 0
    for queued in runs:
        print(f"{queued.position:>3}  {queued.entry.id}  {queued.entry.name}: {queued.text}")
    pid = queue_pid()
    print(f"(the queue's process: {pid})" if pid is not None
          else "(the queue's process does not run: nothing waits)")
    return 0
