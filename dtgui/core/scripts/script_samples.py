"""Sample lines for trying printed-metric patterns: the end of what a script printed in its
latest run (the wizard's "From its last run"). Pure Python; reads the disk (not on a UI
thread).
"""

from __future__ import annotations

from pathlib import Path

from dtgui.core.plans.plan import PLAN_NAME, Plan, PlanError
from dtgui.core.runs.records import RunHistory
from dtgui.core.scripts.script import BUNDLE_PROJECT_DIR
from dtgui.worker.layout import log_file

SAMPLE_LINES = 40
TAIL_BYTES = 64 * 1024


def last_run_output(entry: str, root: Path | None = None, lines: int = SAMPLE_LINES, *,
                    project: Path | None = None) -> tuple[list[str], str]:
    """The last `lines` non-empty lines the main task of the newest run of the script `entry`
    printed, and that run's name ("" when there is none). With the `project` folder, a run of
    this very script (its bundle's copy of the entry is the same file) goes first."""
    runs: list[tuple[Path, Plan, str]] = []
    for record in RunHistory(root).records():
        bundle = Path(record.bundle)
        try:
            plan = Plan.load(str(bundle / PLAN_NAME))
        except PlanError:
            continue
        if plan.script is not None and plan.script.entry == entry:
            runs.append((bundle, plan, record.run_name))
    mine = _read(project / entry) if project is not None else None
    if mine is not None:
        runs.sort(key=lambda run: _read(run[0] / BUNDLE_PROJECT_DIR / entry) != mine)
    for bundle, plan, name in runs:
        for stem in ("chief-0", "worker-0", *(t.file_stem for t in plan.tasks)):
            text = _tail(bundle / log_file(stem))
            if text:
                shown = [ln.rstrip() for ln in text.replace("\r", "\n").split("\n")
                         if ln.strip()]
                return shown[-lines:], name
    return [], ""


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
