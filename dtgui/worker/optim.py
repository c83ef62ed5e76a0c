"""The optimizer and learning-rate schedule a plan asks for (a model file's make_optimizer()
replaces both). Clipping and gradient accumulation are done by the training step itself
(loop.py): Keras would clip each replica's gradient before they are summed."""

from __future__ import annotations

from typing import Any

import keras

from .model_file import ModelSource, UserError


def learning_rate(plan: dict[str, Any]) -> Any:
    """A float, or a keras schedule of the optimizer step (one step = one update)."""
    lr = float(plan.get("learning_rate", 1e-3))
    kind = plan.get("lr_schedule", "constant") or "constant"
    steps = max(1, int(plan.get("steps", 1)))
    if kind == "constant":
        return lr
    if kind == "cosine":
        return keras.optimizers.schedules.CosineDecay(lr, decay_steps=steps)
    if kind == "warmup_cosine":
        warmup = int(plan.get("warmup_steps", 0) or 0)
        return keras.optimizers.schedules.CosineDecay(
            0.0, decay_steps=max(1, steps - warmup), warmup_target=lr, warmup_steps=warmup)
    if kind == "step":
        return keras.optimizers.schedules.ExponentialDecay(
            lr, decay_steps=max(1, int(plan.get("lr_step_every", 1000))),
            decay_rate=float(plan.get("lr_step_factor", 0.1)), staircase=True)
    raise UserError(f'Unknown learning-rate schedule "{kind}" in plan.json (expected '
                    f"constant, cosine, warmup_cosine or step)")


def make_optimizer(plan: dict[str, Any], source: ModelSource) -> Any:
    """The model file's make_optimizer() if it has one, else the plan's choice."""
    if source.make_optimizer is not None:
        optimizer = source.call("make_optimizer")
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            raise UserError(f"make_optimizer() must return a keras optimizer, it returned a "
                            f"{type(optimizer).__name__}")
        return optimizer
    name = plan.get("optimizer", "adam") or "adam"
    lr = learning_rate(plan)
    decay = float(plan.get("weight_decay", 0.0) or 0.0) or None
    if name == "adam":
        return keras.optimizers.Adam(learning_rate=lr)
    if name == "adamw":
        return keras.optimizers.AdamW(learning_rate=lr, weight_decay=decay or 0.0)
    if name == "sgd":
        return keras.optimizers.SGD(learning_rate=lr, momentum=float(plan.get("momentum", 0.9)),
                                    weight_decay=decay)
    if name == "rmsprop":
        return keras.optimizers.RMSprop(learning_rate=lr, weight_decay=decay)
    raise UserError(f'Unknown optimizer "{name}" in plan.json (expected adam, adamw, sgd or '
                    f"rmsprop)")


def learning_rate_at(optimizer: Any, step: int) -> float:
    """The learning rate of update `step` (1-based; the schedule counts updates from 0)."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer
    schedule = inner._learning_rate  # the schedule itself, not its value now
    if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        return float(schedule(max(0, step - 1)))
    return float(schedule.numpy() if hasattr(schedule, "numpy") else schedule)
