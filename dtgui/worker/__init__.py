"""The dtgui training program: run once per task of a run bundle.

Copied verbatim into every bundle as the package ``dtgui_worker``; it uses relative imports
only. Importing this package does not import TensorFlow.
"""

from __future__ import annotations

# The optional API for a user's own training script (reporting.py); no TensorFlow on import.
from .reporting import report, report_epoch, timed

__all__ = ["ReportCallback", "report", "report_epoch", "timed"]


def __getattr__(name: str) -> type:  # ReportCallback is built on first use
    if name == "ReportCallback":
        from .reporting import make_report_callback_class

        cls = make_report_callback_class()
        globals()["ReportCallback"] = cls
        return cls
    raise AttributeError(name)
