"""The plan's option sets (precision, optimizer, schedule ...) and the error a plan gives.

Each option set is a str enum: its values are the names plan.json holds, so a member compares
equal to its name and is written as it. No TensorFlow: the GUI process and every bundle share
this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import TypeVar

_C = TypeVar("_C", bound="Choice")


class PlanError(ValueError):
    """A plan that cannot run, or a plan.json that cannot be read; the message says what to
    change."""


class Choice(str, Enum):
    """One of an option set's names."""

    def __str__(self) -> str:  # the plan.json name in f-strings, logs and file contents
        return str(self.value)

    @classmethod
    def named(cls: type[_C], name: object) -> _C | None:
        """The member called `name`, None when there is none."""
        if not isinstance(name, str):
            return None
        try:
            return cls(name)
        except ValueError:
            return None

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(str(m.value) for m in cls)


class DeviceKind(Choice):
    CPU = "cpu"
    GPU = "gpu"


class Precision(Choice):
    FLOAT32 = "float32"
    MIXED_FLOAT16 = "mixed_float16"
    MIXED_BFLOAT16 = "mixed_bfloat16"


class Communication(Choice):
    """The collective communication of the all-reduce strategies."""

    AUTO = "auto"
    RING = "ring"
    NCCL = "nccl"


class GradCompression(Choice):
    """The dtype gradients cross the network in: cast before the all-reduce, summed in it,
    cast back to float32 before the update."""

    NONE = "none"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"


class Optimizer(Choice):
    ADAM = "adam"
    ADAMW = "adamw"
    SGD = "sgd"
    RMSPROP = "rmsprop"


class LrSchedule(Choice):
    CONSTANT = "constant"
    COSINE = "cosine"
    WARMUP_COSINE = "warmup_cosine"
    STEP = "step"


class MetricsTasks(Choice):
    """Whose printed lines a script's metrics are read from."""

    CHIEF = "chief"  # the main task
    ALL = "all"


def choice_of(kind: type[_C], value: object, where: str) -> _C:
    """`value` as a member of `kind`; PlanError naming `where` and the choices when it is
    none of them (reading plan.json)."""
    found = kind.named(value)
    if found is None:
        raise PlanError(f"plan.json: {where} is {value!r}, which is not one of "
                        f"{', '.join(kind.names())}: set one of them or re-export the plan.")
    return found


def refuse_unknown(data: Iterable[str], known: Iterable[str], where: str) -> None:
    """PlanError naming the first key of `data` that is not in `known` (reading plan.json)."""
    allowed = set(known)
    for key in data:
        if key not in allowed:
            raise PlanError(
                f"plan.json: {where}{key!r} is not a field this dtgui knows (a newer dtgui's, "
                "or a mistyped one): remove it, or open the plan with the dtgui that wrote it.")
