"""The optimizer and learning-rate schedule a plan asks for (a model file's make_optimizer()
replaces both). Clipping and gradient accumulation are done by the training step itself
(loop.py): Keras would clip each replica's gradient before they are summed."""

from __future__ import annotations

from typing import Any

import keras

from .model_file import ModelSource, UserError
from .plan import LR_SCHEDULES, OPTIMIZERS, Plan


def learning_rate(plan: Plan) -> Any:
    """A float, or a keras schedule of the optimizer step (one step = one update)."""
    lr = float(plan.learning_rate)
    kind = plan.lr_schedule
    steps = max(1, plan.steps)
    if kind == "constant":
        return lr
    if kind == "cosine":
        return keras.optimizers.schedules.CosineDecay(lr, decay_steps=steps)
    if kind == "warmup_cosine":
        warmup = plan.warmup_steps
        return keras.optimizers.schedules.CosineDecay(
            0.0, decay_steps=max(1, steps - warmup), warmup_target=lr, warmup_steps=warmup)
    if kind == "step":
        return keras.optimizers.schedules.ExponentialDecay(
            lr, decay_steps=max(1, plan.lr_step_every),
            decay_rate=float(plan.lr_step_factor), staircase=True)
    raise UserError(f'Unknown learning-rate schedule "{kind}" in plan.json (expected one of '
                    f"{', '.join(LR_SCHEDULES)})")


def make_optimizer(plan: Plan, source: ModelSource) -> Any:
    """The model file's make_optimizer() if it has one, else the plan's choice."""
    if source.make_optimizer is not None:
        optimizer = source.call("make_optimizer")
        if not isinstance(optimizer, keras.optimizers.Optimizer):
            raise UserError(f"make_optimizer() must return a keras optimizer, it returned a "
                            f"{type(optimizer).__name__}")
        return optimizer
    name = plan.optimizer
    lr = learning_rate(plan)
    decay = float(plan.weight_decay) or None
    if name == "adam":
        return keras.optimizers.Adam(learning_rate=lr)
    if name == "adamw":
        return keras.optimizers.AdamW(learning_rate=lr, weight_decay=decay or 0.0)
    if name == "sgd":
        return keras.optimizers.SGD(learning_rate=lr, momentum=float(plan.momentum),
                                    weight_decay=decay)
    if name == "rmsprop":
        return keras.optimizers.RMSprop(learning_rate=lr, weight_decay=decay)
    raise UserError(f'Unknown optimizer "{name}" in plan.json (expected one of '
                    f"{', '.join(OPTIMIZERS)})")


def learning_rate_at(optimizer: Any, step: int) -> float:
    """The learning rate of update `step` (1-based; the schedule counts updates from 0)."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer
    schedule = inner._learning_rate  # the schedule itself, not its value now
    if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        return float(schedule(max(0, step - 1)))
    return float(schedule.numpy() if hasattr(schedule, "numpy") else schedule)
