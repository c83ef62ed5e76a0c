"""A plan's training choices in words (the wizard's review, the compare table, READMEs)."""

from __future__ import annotations

from dtgui.core.plan import Plan

OPTIMIZER_NAMES = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "rmsprop": "RMSprop"}


def optimizer_text(plan: Plan) -> str:
    """"AdamW (decay 0.01)", "SGD (momentum 0.9)", plus clipping and accumulation (a model
    file's make_optimizer() replaces the optimizer and its schedule)."""
    name = OPTIMIZER_NAMES.get(plan.optimizer, plan.optimizer)
    extras = []
    if plan.optimizer == "sgd":
        extras.append(f"momentum {plan.momentum:g}")
    if plan.weight_decay and plan.optimizer != "adam":
        extras.append(f"decay {plan.weight_decay:g}")
    text = f"{name} ({', '.join(extras)})" if extras else name
    if plan.clip_norm:
        text += f", clip norm {plan.clip_norm:g}"
    if plan.grad_accumulation > 1:
        text += f", {plan.grad_accumulation} micro-batches per update"
    return text


def schedule_text(plan: Plan) -> str:
    """The learning rate and its schedule: "0.001, warm-up 100 steps then cosine"."""
    lr = f"{plan.learning_rate:g}"
    if plan.lr_schedule == "cosine":
        return f"{lr}, cosine decay"
    if plan.lr_schedule == "warmup_cosine":
        return f"{lr}, warm-up {plan.warmup_steps} steps then cosine"
    if plan.lr_schedule == "step":
        return f"{lr}, × {plan.lr_step_factor:g} every {plan.lr_step_every} steps"
    return lr


def validation_text(plan: Plan) -> str:
    when = f"every {plan.validate_every} steps" if plan.validate_every else "every epoch"
    return when + (", best model kept" if plan.save_best else "")
