"""What a kind's wizard box makes and its driver turns into a target: a run's job on a target
of the kind's own (a cluster's batch job, a pool's run), as the wizard, the review page,
`RunSession.launch`, the queue, an export and a clone carry it without asking its kind.

A sweep's trials on such a target are each one (`dtgui.core.sweep.SweepSpec.job`); sweep.json
and the run queue keep a job as `{"kind": KIND, **to_dict()}`, read back by its kind's driver
(`job_from_dict`)."""

from __future__ import annotations

from typing import Any, Protocol


class TargetJob(Protocol):
    """A kind's job: the kind it is (its driver's), and its fields."""

    @property
    def kind(self) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...
