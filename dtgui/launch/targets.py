"""A run's machine: a `Target`, and the kind of target (its driver) it is.

A `Target` is one machine of a run: this one, a registered machine, or what a kind of its
own reaches (a cluster at its login node). What a kind of target does at each launch step
(check, place, render, upload, its executor, its record, its reattach) is its driver's,
registered in `dtgui.launch.drivers`, whose constructors (`local_target` here,
`plan_targets`, `chosen_targets`, each kind's own) make the targets, and
`driver_for(target)` finds its driver. A target made without a kind is this machine, or a
registered machine of the kind it is.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from dtgui.core.machines.registry import Machine
from dtgui.core.plans.plan import LOCAL_MACHINE, is_local_machine
from dtgui.core.target_job import TargetJob

LOCAL_LABEL = "this machine"  # how messages name the local target
LOCAL_KIND = "local"  # the kind whose tasks are processes on this machine


@dataclass(frozen=True)
class Target:
    """A machine a plan may use: this one (machine None) or a registered one."""

    name: str = LOCAL_MACHINE
    machine: Machine | None = None
    python: str = ""  # "" = this process's interpreter here, `python3` on a remote machine
    address: str = ""  # the address the other machines reach it at ("" = found out)
    gpus: tuple[int, ...] = ()
    job: TargetJob | None = None  # what its kind's own settings are (a Slurm cluster: the job
    # its tasks are; the machine is its login node over SSH, None: this machine)
    kind: str = ""  # its driver's kind ("" = this machine, or its registered machine's)

    def __post_init__(self) -> None:
        if not self.kind:
            object.__setattr__(self, "kind",
                               LOCAL_KIND if self.machine is None else self.machine.kind)

    @property
    def is_local(self) -> bool:
        """On this machine (`is_local_machine`: the one definition, by name): this machine's
        own processes, or a kind's target reached here (a cluster whose login node it is)."""
        return is_local_machine(self.name)

    @property
    def starts_processes_here(self) -> bool:
        """Its tasks are processes dtgui starts on this machine (the local kind)."""
        return self.kind == LOCAL_KIND

    @property
    def needs_connection(self) -> bool:
        """Whether it is reached over a connection: a registered machine whose kind is
        reached over SSH (the kind's registration says)."""
        return self.machine is not None and self.machine.over_ssh

    @property
    def interpreter(self) -> str:
        return self.python or (sys.executable if self.starts_processes_here else "python3")

    @property
    def label(self) -> str:
        """The machine as messages name it."""
        return LOCAL_LABEL if self.starts_processes_here else self.name


def local_target(python: str = "", gpus: tuple[int, ...] = (), address: str = "") -> Target:
    """This machine (`python`: "" = this process's interpreter)."""
    return Target(LOCAL_MACHINE, None, python, address, gpus, kind=LOCAL_KIND)
