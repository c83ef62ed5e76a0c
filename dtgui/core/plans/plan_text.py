"""A plan's training choices in words (the wizard's review, the compare table, READMEs)."""

from __future__ import annotations

import shlex

from dtgui.core.plans.plan import Plan

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


def all_reduce_text(plan: Plan) -> str:
    """The all-reduce's levers in words ("" when none is set): "float16, 4 MiB packs" (the
    dtype the gradients cross the network in)."""
    parts = []
    if plan.grad_compression != "none":
        parts.append(str(plan.grad_compression))
    if plan.bytes_per_pack:
        parts.append(f"{plan.bytes_per_pack / 2**20:g} MiB packs")
    return ", ".join(parts)


def schedule_text(plan: Plan) -> str:
    """The learning rate and its schedule: "0.001, warm-up 100 steps then cosine", "0.05,
    constant" (a bare number does not say it is the learning rate, nor that it stays)."""
    lr = f"{plan.learning_rate:g}"
    if plan.lr_schedule == "cosine":
        return f"{lr}, cosine decay"
    if plan.lr_schedule == "warmup_cosine":
        return f"{lr}, warm-up {plan.warmup_steps} steps then cosine"
    if plan.lr_schedule == "step":
        return f"{lr}, × {plan.lr_step_factor:g} every {plan.lr_step_every} steps"
    return f"{lr}, constant"


def validation_text(plan: Plan) -> str:
    when = f"every {plan.validate_every} steps" if plan.validate_every else "every epoch"
    return when + (", best model kept" if plan.save_best else "")


# -- a user's own script -------------------------------------------------------------------
# dtgui's own training options that a user's script does not take (it trains its own way);
# their values reach it only as DTGUI_* hints.
SCRIPT_OWN = "the script's own"  # an option of dtgui's that a user's script decides itself
NOT_FOR_SCRIPTS = ("steps", "optimizer", "learning-rate schedule", "validation", "checkpoints")
HINT_VARIABLES = ("DTGUI_STEPS", "DTGUI_EPOCHS", "DTGUI_PER_REPLICA_BATCH", "DTGUI_GLOBAL_BATCH",
                  "DTGUI_LEARNING_RATE", "DTGUI_SEED", "DTGUI_PRECISION", "DTGUI_XLA")
NOT_APPLYING = ("dtgui's own " + ", ".join(NOT_FOR_SCRIPTS[:-1]) + " and " + NOT_FOR_SCRIPTS[-1]
                + " do not apply: the script trains its own way")


def script_summary(plan: Plan) -> str:
    """A script run in a few words: "script train.py --epochs 3 · tf_keras" ("" for others)."""
    script = plan.script
    if script is None:
        return ""
    text = "script " + shlex.join([script.entry, *script.args])
    if len(text) > 60:
        text = text[:57] + "…"
    return text + (" · tf_keras" if script.legacy_keras else " · Keras 3")


def keras_text(plan: Plan) -> str:
    script = plan.script
    if script is not None and script.legacy_keras:
        return "legacy Keras 2 (tf_keras): TF_USE_LEGACY_KERAS=1"
    return "Keras 3 (tf.keras and keras are Keras 3; not legacy Keras)"


def printed_metrics_text(plan: Plan) -> str:
    script = plan.script
    if script is None:
        return ""
    how = []
    if script.printed_metrics:
        how.append("name: value pairs")
    if script.patterns:
        how.append(f"{len(script.patterns)} pattern{'s' if len(script.patterns) > 1 else ''}")
    if not how:
        return "not read (TensorBoard files and report() only)"
    where = "every task" if script.metrics_tasks == "all" else "the main task"
    return f"{' and '.join(how)} from the lines it prints, on {where}"


def hint_text(plan: Plan) -> str:
    """The plan's options as the script gets them: "DTGUI_STEPS=100, DTGUI_EPOCHS=4, ..."."""
    values = hint_values(plan)
    return ", ".join(f"{k}={values[k]}" for k in HINT_VARIABLES if k in values)


def hint_values(plan: Plan) -> dict[str, str]:
    from dtgui.core.plans.plan import TaskSpec
    from dtgui.core.scripts.script_bundle import script_environment

    task = plan.tasks[0] if plan.tasks else TaskSpec("worker", 0)
    return script_environment(plan, task)


def script_rows(plan: Plan) -> list[tuple[str, str]]:
    """What a script run is, row by row (the review, `dtgui run`, the run history)."""
    script = plan.script
    if script is None:
        return []
    rows = [("Script", shlex.join([script.entry, *script.args])),
            ("Project", script.project if script.project.startswith(("/", "~"))
             else f"{script.project}/ in the bundle"),
            ("Environment", ", ".join(f"{k}={v}" for k, v in script.env.items()) or "none"),
            ("Keras", keras_text(plan)),
            ("Passed to it", hint_text(plan) + " (hints: the script reads them or not)"),
            ("Metrics", printed_metrics_text(plan) + "; TensorBoard files and report()"),
            ("Not applying", NOT_APPLYING)]
    if script.data_dir:
        rows.insert(3, ("Data on each machine", script.data_dir))
    return rows


def script_text(plan: Plan, indent: str = "  ") -> str:
    """`script_rows` as lines of text."""
    return "\n".join(f"{indent}{label}: {value}" for label, value in script_rows(plan))
