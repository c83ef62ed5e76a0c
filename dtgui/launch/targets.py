"""A run's machine: a `Target`, and the kind of target (its driver) it is.

A `Target` is one machine of a run: this one, a registered machine reached over SSH, or a
Slurm cluster at its login node. What a kind of target does at each launch step (check,
place, render, upload, its executor, its record, its reattach) is its driver's, in
`dtgui.launch.drivers`; the driver modules' constructors (`local_target`, `ssh_target`,
`cluster_target`, `plan_targets`) make the targets, and `driver_for(target)` finds its
driver.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from dtgui.core.machines import Machine
from dtgui.core.plan import LOCAL_MACHINE
from dtgui.core.slurm import SlurmJob

LOCAL_LABEL = "this machine"  # how messages name the local target
LOCAL_KIND = "local"  # the kind whose tasks are processes on this machine


def _default_kind(target: Target) -> str:
    """The kind of a target made without one (the drivers' constructors always give it):
    a cluster when it has a job, a registered machine over SSH, else this machine."""
    if target.slurm is not None:
        return "slurm"
    return LOCAL_KIND if target.machine is None else "ssh"


@dataclass(frozen=True)
class Target:
    """A machine a plan may use: this one (machine None) or a registered one."""

    name: str = LOCAL_MACHINE
    machine: Machine | None = None
    python: str = ""  # "" = this process's interpreter here, `python3` on a remote machine
    address: str = ""  # the address the other machines reach it at ("" = found out)
    gpus: tuple[int, ...] = ()
    slurm: SlurmJob | None = None  # a Slurm cluster: the job the tasks are (machine: its
    # login node over SSH; None: this machine is the login node)
    kind: str = field(default="", compare=True)  # its driver's kind ("" = from the fields)

    def __post_init__(self) -> None:
        if not self.kind:
            object.__setattr__(self, "kind", _default_kind(self))

    @property
    def is_local(self) -> bool:
        """Its tasks are processes of this machine."""
        return self.kind == LOCAL_KIND

    @property
    def needs_connection(self) -> bool:
        return self.machine is not None

    @property
    def interpreter(self) -> str:
        return self.python or (sys.executable if self.is_local else "python3")

    @property
    def label(self) -> str:
        """The machine as messages name it."""
        return LOCAL_LABEL if self.is_local else self.name
