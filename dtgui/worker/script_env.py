"""Facts about a user's own training script shared by the supervisor (here) and dtgui's core
(which imports them): the paths each task gets, `$DTGUI_...` references in arguments and
variable values, and which scalar tags are training losses or count steps. No TensorFlow.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from .layout import events_name, tensorboard_dir

# `$DTGUI_X` / `${DTGUI_X}`: only dtgui's own variables are replaced (no shell runs them).
_REFERENCE = re.compile(r"\$(?:\{(DTGUI_[A-Z0-9_]+)\}|(DTGUI_[A-Z0-9_]+))")
EPOCH_WORDS = ("epoch",)
LOSS_NAMES = ("loss", "batch_loss", "epoch_loss", "train_loss", "training_loss", "total_loss")


def task_paths(bundle_dir: str, out_dir: str, task: str) -> dict[str, str]:
    """The path variables of a script task (docs/own-scripts.md)."""
    stem = task.replace(":", "-")
    return {
        "DTGUI_RUN_DIR": bundle_dir,
        "DTGUI_PROJECT_DIR": os.path.join(bundle_dir, "project"),
        "DTGUI_OUTPUT_DIR": os.path.join(out_dir, "script", stem),
        "DTGUI_TENSORBOARD_DIR": tensorboard_dir(out_dir, task),
        "DTGUI_CHECKPOINT_DIR": os.path.join(out_dir, "checkpoints"),
        "DTGUI_EVENTS_FILE": os.path.join(out_dir, events_name(stem)),
    }


def expand_references(text: str, values: Mapping[str, str]) -> str:
    """Replace `$DTGUI_X` and `${DTGUI_X}` with dtgui's values; anything else is kept as
    written."""
    return _REFERENCE.sub(lambda m: values.get(m.group(1) or m.group(2), m.group(0)), text)


def is_loss_tag(tag: str) -> bool:
    """A training loss: `loss`, `batch_loss`, `train/epoch_loss`, a printed `Train Loss` ...
    (not a validation or test one)."""
    parts = tag.lower().replace(" ", "_").split("/")
    if any(p.startswith(("val", "eval", "test")) for p in parts):
        return False
    return parts[-1] in LOSS_NAMES


def is_step_tag(tag: str) -> bool:
    """A tag whose step counts training steps (not epochs): it can drive the progress."""
    return not any(word in tag.lower() for word in EPOCH_WORDS)
