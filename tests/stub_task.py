"""A stand-in for TensorFlow training, run by the bundle's own supervisor (no TensorFlow here).

The run policy (stop, crash, hang, restart, reattach, the watcher) is tested with this in place
of the training child: the task starts as always (the bundle's task script runs
``$PYTHON -m dtgui_worker.train ...``), but `$PYTHON` is a wrapper (`runs.stub_python`) that
runs this file. As the task's first process it runs the bundle's real supervisor, which starts
its training child with `sys.executable`, the wrapper again; as that child (``--child``) it
writes what the training loop writes (started, steps with per-replica losses, epoch,
checkpoint, finished; a failed event when asked to) and sleeps between calls, so a run that
never ends costs no CPU. Telemetry, signals and exit codes come from the real supervisor; asked
to stop, it saves its checkpoint at the step reached and says so between calls, as the
training loop does (the real `stop_request.StopRequest`).

argv: WRAPPER -m MODULE ARGS... Behaviour, from the wrapper's environment:
  DTGUI_STUB_STEP_SECONDS  seconds a step takes (default 0.02)
  DTGUI_STUB_FAIL          "TASK=ERROR": that task reports ERROR and exits 1 before it steps
Checkpoints: the chief writes files shaped as TensorFlow's into output/checkpoints
(`write_checkpoint_files`: a data shard, a TensorFlow table index saying how long it is, the
state file last, keeping three); a task that starts again resumes from the newest whole one,
as the training loop does (the bundle's `checkpoint_index`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import runpy
import socket
import sys
import time
from typing import TYPE_CHECKING, Any

CALL_STEPS = 5  # steps in one "device call": one `steps` event
TABLE_MAGIC = (0xDB4775248B80FB57).to_bytes(8, "little")  # a TensorFlow table's last bytes
SHARD_BYTES = 4096  # a stub checkpoint's data shard
KEEP = 3  # checkpoints kept, as the training loop's CheckpointManager keeps them


def replica_ids(plan: dict[str, Any], kind: str, index: int) -> list[int]:
    per_task = int(plan.get("replicas_per_task", 1) or 1)
    if plan.get("strategy") == "multi_worker_mirrored":
        return [index * per_task + k for k in range(per_task)]
    if plan.get("strategy") == "parameter_server":
        return [0] if kind == "chief" else []
    return list(range(per_task))


def child(argv: list[str]) -> int:
    import numpy as np

    if TYPE_CHECKING:  # the bundle's dtgui_worker is a copy of dtgui.worker
        from dtgui.worker import step_batch, stop_request
        from dtgui.worker.events import EventWriter
    else:
        from dtgui_worker import step_batch, stop_request
        from dtgui_worker.events import EventWriter

    supervisor = importlib.import_module("dtgui_worker.supervisor")
    if hasattr(supervisor, "child_setup"):
        supervisor.child_setup()  # die with the supervisor, default signal actions
    stop = stop_request.StopRequest().install()
    parser = argparse.ArgumentParser()
    parser.add_argument("--plan")
    parser.add_argument("--task")
    parser.add_argument("--out", default="output")
    args, _ = parser.parse_known_args(argv)
    with open(args.plan, encoding="utf-8") as f:
        plan = json.load(f)
    task: str = args.task
    kind, index = task.split(":")[0], int(task.split(":")[1])
    events = EventWriter(os.path.join(args.out, f"events-{task.replace(':', '-')}.jsonl"), task)
    fail = os.environ.get("DTGUI_STUB_FAIL", "")
    if fail.partition("=")[0] == task:
        error = fail.partition("=")[2]
        events.emit("failed", error=error, traceback=f"RuntimeError: {error}")
        print(f"[{task}] FAILED: {error}", flush=True)
        return 1
    ids = replica_ids(plan, kind, index)
    checkpoints = os.path.join(args.out, "checkpoints")
    resumed = newest_step(checkpoints)
    total = int(plan.get("steps", 0))
    started = {"replicas": len(ids), "replica_ids": ids, "devices": ["/cpu:0"] * len(ids),
               "strategy": plan.get("strategy"), "global_batch": 16, "steps": total,
               "versions": {"python": sys.version.split()[0]}, "pid": os.getpid(),
               "host": socket.gethostname(), "resumed_from_step": resumed,
               "supervisor_pid": os.getppid()}
    events.emit("started", **started)
    if not ids:  # a parameter_server server: serves until it is stopped
        print(f"[{task}] serving", flush=True)
        while True:
            time.sleep(3600)
    seconds = float(os.environ.get("DTGUI_STUB_STEP_SECONDS", "0.02"))
    per_epoch = int(plan.get("steps_per_epoch", 0) or 0) or total
    every = int(plan.get("checkpoint_every", 0) or 0)
    chief = (kind == "chief" or plan.get("strategy") != "parameter_server") and index == 0
    step, begin, timeline, loss = resumed, time.time(), [], 0.0

    def save() -> None:
        os.makedirs(checkpoints, exist_ok=True)
        write_checkpoint_files(checkpoints, step)
        events.emit("checkpoint", step=step, path=f"output/checkpoints/ckpt-{step}")

    while step < total:
        bounds = [total, step + CALL_STEPS, *(step + n - step % n for n in (per_epoch, every)
                                              if n)]
        count = min(bounds) - step
        time.sleep(count * seconds)
        rows = np.arange(step + 1, step + count + 1, dtype=np.float32)[:, None]
        losses = (2.0 / np.sqrt(rows) + 0.01 * np.array(ids, dtype=np.float32)).astype(
            np.float32)
        means = losses.mean(axis=1)
        loss = float(means[-1])
        epoch = step // per_epoch + 1
        events.emit("steps", first=step + 1, count=count, stride=1, epoch=epoch,
                    replica_ids=ids, encoding=step_batch.ENCODING,
                    losses=step_batch.encode(losses), means=step_batch.encode(means),
                    loss=loss, examples_per_sec=800.0, lr=0.01)
        step += count
        timeline.append([step, round(time.time() - begin, 3)])
        print(f"[{task}] step {step}/{total} epoch {epoch} loss {loss:.4f}", flush=True)
        if step % per_epoch == 0:
            events.emit("epoch", epoch=step // per_epoch, loss=loss, steps=step,
                        metrics={"accuracy": 0.5})
        if stop.requested and step < total:
            saved = step > resumed
            if saved and chief:
                save()
            why = stop_request.stop_reason(stop.signal)
            events.emit("log", level="warning", stopped_at=step, saved=saved,
                        message=stop_request.stopped_message(step, saved, why))
            return stop_request.STOPPED_EXIT
        if every and step % every == 0 and chief:
            save()
    if every and step % every != 0 and step > resumed and chief:
        save()  # the end, as the training loop saves it when it is not on an interval
    if plan.get("profile_steps"):  # the plan's profile steps: said as the worker says them
        first, last = plan["profile_steps"]
        where = os.path.join(os.path.abspath(args.out), "tensorboard", task.replace(":", "-"),
                             "plugins", "profile")
        events.emit("log", level="info", message=f"profile: steps {first}-{last} captured in "
                    f"{where} (starting the profiler took 0.00 s, writing the trace 0.01 s)")
    events.emit("finished", steps=step, loss=loss, seconds=round(time.time() - begin, 3),
                timeline=timeline)
    print(f"[{task}] finished {step} steps, loss {loss}", flush=True)
    return 0


def newest_step(checkpoints: str) -> int:
    """The step of the newest whole checkpoint (0: none), skipping newer ones cut short as
    the training loop does."""
    if TYPE_CHECKING:
        from dtgui.worker.checkpoint_index import newest_whole, step_of
    else:
        from dtgui_worker.checkpoint_index import newest_whole, step_of
    try:
        name, skipped = newest_whole(checkpoints)
    except (OSError, ValueError):
        return 0
    for bad, why in skipped:
        print(f"[dtgui] checkpoint {bad} skipped: {why}", file=sys.stderr, flush=True)
    return step_of(name) if name else 0


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _table_block(entries: list[tuple[bytes, bytes]]) -> bytes:
    """A TensorFlow table block of whole keys (no prefix sharing), one restart point, and
    its trailer (uncompressed; the crc is not read)."""
    body = b"".join(_varint(0) + _varint(len(k)) + _varint(len(v)) + k + v for k, v in entries)
    return body + (0).to_bytes(4, "little") + (1).to_bytes(4, "little") + b"\0" + b"\0" * 4


def table_index(shard_bytes: int) -> bytes:
    """A checkpoint index as TensorFlow writes it: one shard, one tensor of `shard_bytes`."""
    header = b"\x08\x01"  # BundleHeaderProto num_shards = 1
    entry = b"\x18\x00\x20\x00\x28" + _varint(shard_bytes)  # shard 0, offset 0, size
    data = _table_block([(b"", header), (b"step", entry)])
    meta = _table_block([])
    index = _table_block([(b"step\0", _varint(0) + _varint(len(data) - 5))])
    handles = (_varint(len(data)) + _varint(len(meta) - 5)
               + _varint(len(data) + len(meta)) + _varint(len(index) - 5))
    return data + meta + index + handles.ljust(40, b"\0") + TABLE_MAGIC


def write_checkpoint_files(checkpoints: str, step: int) -> None:
    """The files tf.train.CheckpointManager writes, as a resume checks them without
    TensorFlow (dtgui.core.bundles.checkpoint_files): one data shard, its index, the state
    file last naming the newest and the ones kept (older ones deleted)."""
    prefix = os.path.join(checkpoints, f"ckpt-{step}")
    with open(prefix + ".data-00000-of-00001", "wb") as f:
        f.write(b"s" * SHARD_BYTES)
    with open(prefix + ".index", "wb") as f:
        f.write(table_index(SHARD_BYTES))
    steps = sorted({int(m.group(1)) for name in os.listdir(checkpoints)
                    if (m := re.fullmatch(r"ckpt-(\d+)\.index", name))})
    kept = [s for s in steps if s <= step][-KEEP:]
    lines = [f'model_checkpoint_path: "ckpt-{step}"',
             *(f'all_model_checkpoint_paths: "ckpt-{s}"' for s in kept)]
    with open(os.path.join(checkpoints, "checkpoint.tmp"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(os.path.join(checkpoints, "checkpoint.tmp"), os.path.join(checkpoints,
                                                                        "checkpoint"))
    for old in steps:
        if old not in kept:
            for name in os.listdir(checkpoints):
                if name.startswith(f"ckpt-{old}."):
                    os.remove(os.path.join(checkpoints, name))


def main() -> int:
    wrapper, args = sys.argv[1], sys.argv[2:]
    sys.path.insert(0, os.getcwd())  # the bundle: its own dtgui_worker
    if "--child" in args:
        return child(args[2:])
    # the supervisor, for real: its child is started with sys.executable, this wrapper
    sys.executable = wrapper
    assert args[0] == "-m", args
    sys.argv = [args[1], *args[2:]]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
