"""A run's checkpoints as files, read without TensorFlow: which is the newest whole one, at
which step, and which newer ones are not whole and why (a resume asks before anything starts,
and says what it skipped).

dtgui's training loop writes `tf.train.CheckpointManager` checkpoints into
`output/checkpoints/`: a `checkpoint` state file naming the newest (`ckpt-<step>`) and the
ones kept before it, each with its `.index` (a TensorFlow table) and data shards
(`.data-<i>-of-<n>`). Whether one is whole (its index read to its end, every shard as long as
the index says) is `dtgui.worker.checkpoint_index`, the same answer the training loop acts on
when it restores. A user's own script keeps its checkpoints as it likes there
(`DTGUI_CHECKPOINT_DIR`): any file counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dtgui.worker.checkpoint_index import STATE_FILE, newest_whole, step_of
from dtgui.worker.layout import CHECKPOINTS_NAME

CHECKPOINTS_DIR = CHECKPOINTS_NAME  # in a bundle's output directory


@dataclass(frozen=True)
class Found:
    """The newest whole checkpoint of a directory, or why there is none to restore."""

    step: int = 0  # its step (0: unknown, a script's own checkpoint)
    problem: str = ""  # "" = whole enough to restore
    skipped: tuple[str, ...] = ()  # newer checkpoints that are not whole, each with why

    @property
    def ok(self) -> bool:
        return not self.problem

    @property
    def skipped_text(self) -> str:
        """The skipped checkpoints in words ("" = none was)."""
        return "; ".join(self.skipped)


def newest_checkpoint(directory: Path, own_script: bool = False) -> Found:
    """The newest whole checkpoint in `directory` (a run's output/checkpoints). `own_script`:
    a user's script's directory, whatever its files are."""
    where = str(directory)
    if own_script:
        try:
            has_files = any(p.is_file() for p in directory.rglob("*"))
        except OSError:
            has_files = False
        return Found() if has_files else Found(problem=f"{where} holds no checkpoint")
    try:
        name, skipped = newest_whole(str(directory))
    except FileNotFoundError:
        return Found(problem=f"{where} holds no checkpoint")
    except OSError as exc:
        return Found(problem=f"{where}/{STATE_FILE} cannot be read ({exc.strerror})")
    except ValueError:
        return Found(problem=f"{where}/{STATE_FILE} names no checkpoint: it is damaged")
    why = tuple(f"the checkpoint of step {step_of(n)} was skipped: {problem}"
                for n, problem in skipped)
    if not name:
        step = step_of(skipped[0][0]) if skipped else 0
        return Found(step, f"no checkpoint in {where} is whole ({'; '.join(why)})", why)
    return Found(step_of(name), "", why)
