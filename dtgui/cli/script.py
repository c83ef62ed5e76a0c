"""`dtgui export` options for a user's own training script (docs/own-scripts.md).

    --script ENTRY --project DIR [--script-arg ARG ...] [--env K=V ...] [--legacy-keras]
    [--data-dir PATH] [--metric-pattern REGEX ...] [--no-printed-metrics] [--metrics-from all]

ENTRY is a path inside DIR (default DIR: ENTRY's folder). Before anything is written the entry
script and the project's modules are looked at (no run, no TensorFlow): a Keras 3 `model.fit`
under MultiWorkerMirrored or ParameterServer is refused with both ways out.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from dtgui.core.plans.plan import MetricsTasks
from dtgui.core.scripts.script import (
    ScriptModel,
    env_name_problem,
    env_value_problem,
    script_problems,
)


def add_script_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "your own training script",
        "Run your own TensorFlow script on the cluster instead of dtgui's training loop: each "
        "task runs `python ENTRY ARGS` in the bundle's copy of the project folder, with "
        "TF_CONFIG, CUDA_VISIBLE_DEVICES and DTGUI_* variables set (see docs/own-scripts.md).")
    group.add_argument("--script", type=Path, default=None, metavar="ENTRY",
                       help="the training script to run (inside --project)")
    group.add_argument("--project", type=Path, default=None, metavar="DIR",
                       help="the folder copied into the bundle (default: ENTRY's folder); "
                       ".git, caches, virtualenvs and what .dtguiignore / .gitignore list are "
                       "left out")
    group.add_argument("--script-arg", action="append", default=[], metavar="ARG",
                       help="one argument for the script (repeatable, in order; write "
                       "--script-arg=--epochs=3 for one that starts with '-'; "
                       "$DTGUI_TENSORBOARD_DIR and the other DTGUI_ variables are replaced)")
    group.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                       help="a variable for every task (repeatable)")
    group.add_argument("--legacy-keras", action="store_true",
                       help="run with tf_keras (TF_USE_LEGACY_KERAS=1): needed for model.fit "
                       "under multi_worker_mirrored / parameter_server")
    group.add_argument("--data-dir", default="", metavar="PATH",
                       help="data that stays on each machine at PATH (DTGUI_DATASET_DIR)")
    group.add_argument("--metric-pattern", action="append", default=[], metavar="REGEX",
                       help="read metrics from printed lines this regular expression matches: "
                       "named groups, step/epoch for the x and any other for a value "
                       "(repeatable)")
    group.add_argument("--no-printed-metrics", action="store_true",
                       help="do not read name: value pairs from the lines the script prints "
                       "(patterns still apply)")
    group.add_argument("--metrics-from", choices=("chief", "all"), default="chief",
                       help="whose printed lines are read: the main task (default) or all")


def wants_script(args: argparse.Namespace) -> bool:
    return args.script is not None or args.project is not None


def script_model_from_args(args: argparse.Namespace) -> tuple[ScriptModel | None, list[str]]:
    """The plan's model for --script/--project, and every problem with them."""
    if not wants_script(args):
        extra = [o for o, v in (("--script-arg", args.script_arg), ("--env", args.env),
                                ("--legacy-keras", args.legacy_keras),
                                ("--data-dir", args.data_dir),
                                ("--metric-pattern", args.metric_pattern),
                                ("--no-printed-metrics", args.no_printed_metrics)) if v]
        return None, [f"{o} needs --script ENTRY." for o in extra]
    problems: list[str] = []
    if args.model is not None:
        problems.append("--model and --script exclude each other: choose one.")
    if args.script is None:
        return None, [*problems, "--project needs --script ENTRY (the script to run)."]
    entry = args.script.expanduser()
    given = args.project.expanduser().resolve() if args.project is not None else None
    if entry.is_absolute():
        entry_abs = entry
    elif given is not None and (given / entry).exists():
        entry_abs = given / entry  # a path inside the project
    else:
        entry_abs = Path.cwd() / entry
    project = given if given is not None else entry_abs.resolve().parent
    try:
        rel = Path(os.path.relpath(entry_abs.resolve(), project)).as_posix()
    except ValueError:
        rel = str(entry)
    env: dict[str, str] = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        problem = ("--env " + repr(item) + " is not KEY=VALUE.") if not sep else (
            env_name_problem(name) or env_value_problem(name, value))
        if problem:
            problems.append(f"--env: {problem}")
        else:
            env[name] = value
    model = ScriptModel(str(project), rel, tuple(args.script_arg), env, bool(args.legacy_keras),
                        args.data_dir, printed_metrics=not args.no_printed_metrics,
                        patterns=tuple(args.metric_pattern),
                        metrics_tasks=MetricsTasks(args.metrics_from))
    problems += script_problems(model, must_exist=True)
    return model, problems


def script_refusal(plan: Any) -> str:
    """Why the script cannot run under the plan's strategy (a static look at its code)."""
    from dtgui.launch.checks.script_check import study

    found = study(plan)
    if found is not None:
        for warning in found.warnings:  # it may fail: said with the fix, not refused
            print(f"dtgui export: warning: {warning}", file=sys.stderr)
    return found.refusal if found is not None else ""
