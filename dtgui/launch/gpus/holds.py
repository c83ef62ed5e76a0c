"""The GPUs running sweeps' trials hold, so that single runs and other sweeps share the GPUs
(docs/sweeps.md, "Sharing GPUs with single runs").

A sweep's queue keeps its own file in `<data dir>/sweep-gpus/<pid>.json` (`HoldRegister`):
every GPU one of its running trials was given, with the trial and the sweep, rewritten as
trials start and end and removed when the sweep ends. `read_holds()` gathers every sweep's
that still runs (a file whose process is gone is a sweep that was killed: it holds nothing);
the wizard's GPU picker shows those GPUs as busy ("trial 4 of sweep lr-search") and a sweep
leaves them to the other sweep. The run queue (`dtgui.launch.queue.run_queue`) keeps the GPUs of a
queued run it is starting the same way ("run NAME"), until the run's record holds them. A GPU's own figures (memory, processes) say the rest: a
trial's GPU is held from its start, before its process has loaded anything onto it.

Reads and writes small files: not on a UI thread.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dtgui.core.plans.plan import LOCAL_MACHINE, is_local_machine
from dtgui.core.settings import atomic_write_text, data_dir

HOLDS_DIR = "sweep-gpus"


@dataclass(frozen=True)
class Hold:
    """One GPU a running trial of a sweep (or a queued run being started) was given."""

    machine: str  # "local" = this machine, else a registered machine's name
    gpu: int
    trial: int  # the trial's number in its study (as the sweep view shows it)
    sweep: str  # the sweep's name (its run setup's)
    run: str = ""  # a queued run's name (then not a sweep's trial)

    @property
    def text(self) -> str:
        return f"run {self.run}" if self.run else f"trial {self.trial} of sweep {self.sweep}"


def holds_dir() -> Path:
    return data_dir() / HOLDS_DIR


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


class HoldRegister:
    """A sweep's own file of the GPUs its running trials hold."""

    def __init__(self, sweep: str, directory: Path | None = None, pid: int | None = None
                 ) -> None:
        self.sweep = sweep
        self.path = (directory or holds_dir()) / f"{pid or os.getpid()}.json"
        self._holds: dict[int, list[Hold]] = {}  # trial -> its GPUs

    def hold(self, trial: int, machine: str, gpus: Iterable[int], run: str = "") -> None:
        """The trial (or the queued run `run`) runs on these GPUs of `machine` from now
        on."""
        key = LOCAL_MACHINE if is_local_machine(machine) else machine
        held = [Hold(key, gpu, trial, self.sweep, run) for gpu in gpus]
        if held:
            self._holds[trial] = held
            self._write()

    def release(self, trial: int) -> None:
        """The trial has ended: its GPUs are free for others."""
        if self._holds.pop(trial, None) is not None:
            self._write()

    def close(self) -> None:
        """The sweep ends: it holds nothing."""
        self._holds.clear()
        with contextlib.suppress(OSError):
            self.path.unlink()

    def _write(self) -> None:
        holds = [h for held in self._holds.values() for h in held]
        if not holds:
            with contextlib.suppress(OSError):
                self.path.unlink()
            return
        data = [{"machine": h.machine, "gpu": h.gpu, "trial": h.trial, "sweep": h.sweep,
                 **({"run": h.run} if h.run else {})} for h in holds]
        # a register that cannot be written: the sweep goes on, and others learn of its GPUs
        # from their figures alone
        with contextlib.suppress(OSError):
            atomic_write_text(self.path, json.dumps(data) + "\n")


def read_holds(directory: Path | None = None, but_pid: int | None = None) -> list[Hold]:
    """Every GPU the trials of the sweeps that still run hold (not those of process
    `but_pid`: a sweep's own)."""
    found: list[Hold] = []
    folder = directory or holds_dir()
    try:
        paths = sorted(folder.glob("*.json"))
    except OSError:
        return found
    for path in paths:
        if not path.stem.isdigit() or int(path.stem) == but_pid or not _alive(int(path.stem)):
            continue
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            for item in json.loads(path.read_text(encoding="utf-8")):
                found.append(Hold(str(item["machine"]), int(item["gpu"]), int(item["trial"]),
                                  str(item["sweep"]), str(item.get("run", ""))))
    return found


def busy_gpus(holds: Sequence[Hold]) -> dict[str, dict[int, str]]:
    """Machine -> GPU -> who holds it ("trial 4 of sweep X")."""
    out: dict[str, dict[int, str]] = {}
    for hold in holds:
        out.setdefault(hold.machine, {})[hold.gpu] = hold.text
    return out

