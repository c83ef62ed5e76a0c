"""A run's checkpoints as files, read without TensorFlow: which is the newest, at which step,
and whether its files are whole enough to restore (a resume asks before anything starts).

dtgui's training loop writes `tf.train.CheckpointManager` checkpoints into
`output/checkpoints/`: a `checkpoint` state file naming the newest (`ckpt-<step>`), its
`.index` (a TensorFlow table, which ends with the table format's magic number) and its data
shards (`.data-<i>-of-<n>`). A user's own script keeps its checkpoints as it likes there
(`DTGUI_CHECKPOINT_DIR`): any file counts.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

from dtgui.worker.layout import CHECKPOINTS_NAME

CHECKPOINTS_DIR = CHECKPOINTS_NAME  # in a bundle's output directory
STATE_FILE = "checkpoint"
TABLE_MAGIC = struct.pack("<Q", 0xDB4775248B80FB57)  # tensorflow/core/lib/io/format.h
_NEWEST = re.compile(r'^model_checkpoint_path:\s*"(.*)"\s*$', re.MULTILINE)
_SHARDS = re.compile(r"\.data-(\d+)-of-(\d+)$")


@dataclass(frozen=True)
class Found:
    """The newest checkpoint of a directory, or why there is none to restore."""

    step: int = 0  # its step (0: unknown, a script's own checkpoint)
    problem: str = ""  # "" = whole enough to restore

    @property
    def ok(self) -> bool:
        return not self.problem


def newest_checkpoint(directory: Path, own_script: bool = False) -> Found:
    """The newest checkpoint in `directory` (a run's output/checkpoints) and whether it can
    be restored. `own_script`: a user's script's directory, whatever its files are."""
    where = str(directory)
    if own_script:
        try:
            has_files = any(p.is_file() for p in directory.rglob("*"))
        except OSError:
            has_files = False
        return Found() if has_files else Found(problem=f"{where} holds no checkpoint")
    try:
        state = (directory / STATE_FILE).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return Found(problem=f"{where} holds no checkpoint")
    except OSError as exc:
        return Found(problem=f"{where}/{STATE_FILE} cannot be read ({exc.strerror})")
    match = _NEWEST.search(state)
    if match is None:
        return Found(problem=f"{where}/{STATE_FILE} names no checkpoint: it is damaged")
    prefix = Path(match.group(1)).name
    step_text = prefix.rpartition("-")[2]
    step = int(step_text) if step_text.isdigit() else 0
    index = directory / f"{prefix}.index"
    try:
        size = index.stat().st_size
        with open(index, "rb") as f:
            f.seek(max(0, size - len(TABLE_MAGIC)))
            tail = f.read()
    except OSError:
        return Found(step, f"the checkpoint of step {step} has no {index.name}: it is "
                           "incomplete")
    if tail != TABLE_MAGIC:
        return Found(step, f"the checkpoint of step {step} is damaged ({index.name} is not a "
                           "TensorFlow checkpoint index)")
    shards = [m for p in directory.glob(f"{prefix}.data-*") if (m := _SHARDS.search(p.name))]
    count = int(shards[0].group(2)) if shards else 1
    missing = sorted(set(range(count)) - {int(m.group(1)) for m in shards})
    if missing:
        return Found(step, f"the checkpoint of step {step} is incomplete: data shard(s) "
                           f"{', '.join(str(i) for i in missing)} of {count} are missing")
    return Found(step)
