"""A run whose disk is full: which machine's output filled up, and what the run says when it
stops for it (a restart would fail the same way, so it is not restarted)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from dtgui.core.bundles.checkpoint_files import CHECKPOINTS_DIR, newest_checkpoint
from dtgui.launch.exec.executor import Executor


def full_disk(failed: Iterable[Executor], unreachable: Iterable[str]) -> tuple[str, str] | None:
    """(machine, output directory) of the first of the failed tasks' executors whose disk is
    full (None: none). A machine that does not answer is not asked: its disk cannot be why,
    and asking would wait out the connect timeout before the run fails."""
    silent = set(unreachable)
    for ex in failed:
        if ex.name in silent:
            continue
        output = ex.full_output()
        if output:
            return ex.name, output
    return None


def full_disk_message(machine: str, output: str, *, multi_machine: bool, step: int,
                      local_output: Path, mirrored: bool) -> str:
    """The stopped run's message: the step reached and the checkpoint a resume goes on from
    once there is room (read here when the output is this machine's, `mirrored`: copied
    from another machine's, where it stays)."""
    where = f" on {machine}" if multi_machine else ""
    if mirrored:
        kept = f"its checkpoints are in {output}/{CHECKPOINTS_DIR}"
    else:
        found = newest_checkpoint(local_output / CHECKPOINTS_DIR)
        kept = f"its last whole checkpoint is at step {found.step}" if found.ok \
            else "it has no whole checkpoint"
    return (f"the disk holding {output}{where} is full: training stopped at step {step}; "
            f"{kept}. Free space there, then resume the run.")
