"""How the training process ends: once its results are written, at once.

Releasing TensorFlow's objects and finalizing the interpreter takes seconds with a built
strategy, and longer while tf.data's threads wind down (an input pipeline's iterator waits
for them, with the GIL held). Nothing of that is a result: the model, checkpoints, events and
summaries are written and flushed before the process ends, so it leaves without it. No
TensorFlow here: train.py imports this before TensorFlow is loaded.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn


def leave(code: int) -> NoReturn:
    """End this process with exit code `code`, skipping the interpreter's teardown.

    Call it only when every result is written: Python's buffered streams and logging are
    flushed here, files left open are not (events are written unbuffered; the summaries
    and checkpoints are closed by the training loop)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


_KEPT: list[object] = []


def keep(*objects: object) -> None:
    """Hold `objects` until the process ends: their release (an input pipeline's threads
    winding down) is not waited for, whether the task finishes or fails."""
    _KEPT.extend(objects)
