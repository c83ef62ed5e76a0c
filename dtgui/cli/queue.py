"""`dtgui queue`: the runs waiting for their GPUs or machines ("Launch when free" in the
wizard), in order, with what each waits for; `cancel`, `up` and `down` change it."""

from __future__ import annotations

import argparse
import sys

from dtgui.core.runs.queue_file import QueueError


def add_queue(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    queue = sub.add_parser(
        "queue", help="the runs waiting for free GPUs or machines: list, cancel, reorder",
        description="Runs launched with 'Launch when free' wait here until their GPUs and "
        "machines are free, then start in the background (also while dtgui is closed). With "
        "no action: each queued run with its position, id and what it waits for.")
    queue.add_argument("action", nargs="?", choices=("list", "cancel", "up", "down"),
                       default="list", help="up/down: move the run one place")
    queue.add_argument("id", nargs="?", default="", help="the queued run's id (see the list)")


def cmd_queue(args: argparse.Namespace) -> int:
    from dtgui.launch.queue.run_queue import (
        cancel_queued,
        move_queued,
        queue_pid,
        queued_runs,
        resume_queue,
    )

    try:
        if args.action != "list":
            if not args.id:
                print(f"dtgui queue {args.action}: give the queued run's id (dtgui queue "
                      "lists them).", file=sys.stderr)
                return 2
            if args.action == "cancel":
                cancel_queued(args.id)
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
