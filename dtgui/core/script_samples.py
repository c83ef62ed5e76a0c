"""Sample lines for trying printed-metric patterns: the end of what a script printed in its
latest run (the wizard's "From its last run"). Pure Python; reads the disk (not on a UI
thread).
"""

from __future__ import annotations

from pathlib import Path

from dtgui.core.plan import PLAN_NAME, Plan, PlanError
from dtgui.core.runs import RunHistory

SAMPLE_LINES = 40
TAIL_BYTES = 64 * 1024


def last_run_output(entry: str, root: Path | None = None,
                    lines: int = SAMPLE_LINES) -> tuple[list[str], str]:
    """The last `lines` non-empty lines the main task of the newest run of the script `entry`
    printed, and that run's name ("" when there is none)."""
    for record in RunHistory(root).records():
        bundle = Path(record.bundle)
        try:
            plan = Plan.load(str(bundle / PLAN_NAME))
        except PlanError:
            continue
        if plan.script is None or plan.script.entry != entry:
            continue
        logs = bundle / "output" / "logs"
        for stem in ("chief-0", "worker-0", *(t.file_stem for t in plan.tasks)):
            text = _tail(logs / f"{stem}.log")
            if text:
                shown = [ln.rstrip() for ln in text.replace("\r", "\n").split("\n")
                         if ln.strip()]
                return shown[-lines:], record.run_name
    return [], ""


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
