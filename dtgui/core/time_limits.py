"""Time limits on starting work whose time is the machine's, not dtgui's: importing TensorFlow
(the machine probe, the pre-launch check, a model file's check) and reading a machine's facts.

On a machine whose cores are shared with other work, or whose venv sits on a network file
system, importing TensorFlow can take minutes instead of seconds. `DTGUI_START_LIMIT_FACTOR`
(a number, default 1) stretches every such limit at once; the test suite sets it, so that
load on the machine never decides a test's outcome (a test of a limit gives its own).
"""

from __future__ import annotations

import os

FACTOR_VARIABLE = "DTGUI_START_LIMIT_FACTOR"


def start_limit(seconds: float) -> float:
    """`seconds`, stretched by the factor in the environment (a value that is not a positive
    number counts as 1)."""
    try:
        factor = float(os.environ.get(FACTOR_VARIABLE, "1"))
    except ValueError:
        factor = 1.0
    return seconds * factor if factor > 0 else seconds
