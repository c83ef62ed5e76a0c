"""A profile asked of a running training process: "the next N steps". No TensorFlow.

It travels the way a stop does (the launcher signals each task's process group, see
stop_request.py), with PROFILE_SIGNAL; N cannot ride on a signal, so the launcher first writes
it to REQUEST_NAME in the task's output folder. The signal only sets a flag; the training loop
reads N between its calls. The task wrapper ignores the signal (layout.WRAPPER), so a process
that installs no handler (a user's script, the supervisor) is not ended by it. Only the chief
task puts N into the call's agreement (loop.py's
``stop`` pair): tasks see the signal after different calls, and one contribution is what
makes every MultiWorkerMirrored worker start the capture at the same step.
"""

from __future__ import annotations

import os
import signal
from typing import Any

PROFILE_SIGNAL = signal.SIGUSR2
REQUEST_NAME = "profile_request"
MAX_PROFILE_STEPS = 1000  # a trace of more steps is too large for TensorBoard to open
# The marker a capture puts around each profiled call, with its first and last step
# (profile_capture.py); what a profile says of the input is read back by it
# (dtgui.core.measure.profile_input)
STEP_MARK = "train"


def parse_request(text: str) -> int:
    """The number of steps a request file asks for (0: none, or not a number)."""
    try:
        steps = int(text.strip())
    except ValueError:
        return 0
    return steps if 0 < steps <= MAX_PROFILE_STEPS else 0


class ProfileRequest:
    """Set by PROFILE_SIGNAL; `take` is read by the training loop between its calls."""

    def __init__(self, out_dir: str) -> None:
        self.path = os.path.join(out_dir, REQUEST_NAME)
        self._signalled = False

    def install(self) -> ProfileRequest:
        signal.signal(PROFILE_SIGNAL, self._note)
        return self

    def _note(self, _sig: int, _frame: Any) -> None:
        self._signalled = True

    def take(self) -> int:
        """The steps asked since the last call (0: none)."""
        if not self._signalled:
            return 0
        self._signalled = False
        try:
            with open(self.path, encoding="utf-8") as f:
                return parse_request(f.read())
        except OSError:
            return 0
