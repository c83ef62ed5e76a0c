"""Checkpoints: tf.train.Checkpoint(model, optimizer, step) + CheckpointManager."""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

import tensorflow as tf

from .checkpoint_index import newest_whole
from .distribute import BuiltStrategy

MAX_TO_KEEP = 3


class Checkpoints:
    """Saves to ``<out>/checkpoints`` (MWMS non-chief workers: a temp dir they then delete)."""

    def __init__(self, out_dir: str, info: BuiltStrategy, model: Any, optimizer: Any,
                 step_var: tf.Variable) -> None:
        self.main_dir = os.path.join(out_dir, "checkpoints")
        self.info = info
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step_var)
        self.step_var = step_var
        if info.is_chief:
            self.dir = self.main_dir
        else:  # TF docs: every MWMS worker saves, non-chief ones to a throw-away directory
            self.dir = os.path.join(self.main_dir, f"tmp-worker-{info.worker_index}")
        self.manager = tf.train.CheckpointManager(self.checkpoint, self.dir,
                                                  max_to_keep=MAX_TO_KEEP)

    def restore_latest(self) -> int:
        """Restore the newest whole checkpoint of the chief's directory; returns its step (0:
        none). A newer one that is not whole (a save cut short by a full disk or a kill) is
        skipped, said in the log: every worker reads the same files, so all skip alike, and
        the resume's check before the start said the same (`checkpoint_index`)."""
        try:
            name, skipped = newest_whole(self.main_dir)
        except (OSError, ValueError):
            name, skipped = "", []
        for bad, why in skipped:
            print(f"[dtgui] checkpoint {bad} skipped: {why}", file=sys.stderr, flush=True)
        if not name:
            return 0
        self.checkpoint.restore(os.path.join(self.main_dir, name)).expect_partial()
        return int(self.step_var.numpy())

    def save(self, step: int) -> str:
        """Save at ``step`` (every MWMS worker must call this); returns the chief's path."""
        self.step_var.assign(step)
        path = self.manager.save(checkpoint_number=step)
        if not self.info.is_chief:
            shutil.rmtree(self.dir, ignore_errors=True)
        return path or ""
