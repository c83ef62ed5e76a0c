"""Checkpoints: tf.train.Checkpoint(model, optimizer, step) + CheckpointManager."""

from __future__ import annotations

import os
import shutil
from typing import Any

import tensorflow as tf

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
        """Restore the newest checkpoint of the chief's directory; returns its step (0: none)."""
        latest = tf.train.latest_checkpoint(self.main_dir)
        if not latest:
            return 0
        self.checkpoint.restore(latest).expect_partial()
        return int(self.step_var.numpy())

    def save(self, step: int) -> str:
        """Save at ``step`` (every MWMS worker must call this); returns the chief's path."""
        self.step_var.assign(step)
        path = self.manager.save(checkpoint_number=step)
        if not self.info.is_chief:
            shutil.rmtree(self.dir, ignore_errors=True)
        return path or ""
