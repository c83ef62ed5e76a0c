"""`dtgui sweep OUT`: run a sweep from the command line (docs/sweeps.md).

The run is described by the export options (strategy, model, script, placement:
`dtgui.cli.main` gives `add_sweep` the function that adds them and `cmd_sweep` the one that
reads a checked plan from them, so that this module does not import it); `--param` names what
varies. The queue runs in the foreground (`dtgui.launch.sweeps.sweep_process.run_sweep`, as the
sweep's detached process runs it). Each trial is printed as it ends; the trials are in
OUT/trials.csv and the Optuna study (OUT/study.db unless --storage). Given a folder that holds
a sweep already, the sweep goes on from its study: `--trials` more than it had adds trials.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from dtgui.cli.kind_options import KindOptions, chosen_options
from dtgui.cli.tracking import add_mlflow_option
from dtgui.core.plans.plan import Plan
from dtgui.core.sweeps.sweep import (
    DEFAULT_OBJECTIVE,
    DIRECTIONS,
    PRUNERS,
    SEARCHES,
    SWEEP_FILE,
    SweepError,
    SweepSpec,
    default_pruner,
    load_sweep,
    parse_param,
    save_sweep,
)

PROG = "dtgui sweep"
AddOptions = Callable[[argparse.ArgumentParser], None]
CheckedPlan = Callable[[argparse.Namespace], Plan]


def add_sweep(sub: argparse._SubParsersAction[argparse.ArgumentParser],
              formatter: type[argparse.HelpFormatter], add_export_options: AddOptions) -> None:
    """The `sweep` command, with the export options `add_export_options` adds."""
    sweep = sub.add_parser(
        "sweep", help="train a run setup many times with settings varied (an Optuna search)",
        formatter_class=formatter,
        description="Runs trials of the run the export options describe, K at a time, "
        "with the --param values chosen by the search; prints each trial as it ends.")
    sweep.add_argument("out", type=Path, help="the sweep's folder (new, or a sweep to go on "
                       "with)")
    add_mlflow_option(sweep)
    group = sweep.add_argument_group("sweep")
    group.add_argument("--param", action="append", default=[], metavar="NAME=SPACE",
                       help="a parameter and its values: lr=loguniform:1e-4:1e-1, "
                       "batch-size=choice:16,32,64, warmup=int:0:100, clip-norm=uniform:0:5, "
                       "DTGUI_X=... or --option=... (your script's); repeat for each")
    group.add_argument("--trials", type=int, default=None, help="trials in all (default 10)")
    group.add_argument("--parallel", type=int, default=None,
                       help="trials at once (default 1)")
    group.add_argument("--search", choices=SEARCHES, default=None,
                       help="tpe (Bayesian; default), random, or grid (every combination)")
    group.add_argument("--objective", default=None,
                       help=f"what is compared: {DEFAULT_OBJECTIVE} (best validation loss; the "
                       "default), val_METRIC, loss (the final training loss) or a scalar "
                       "your script reports")
    group.add_argument("--direction", choices=DIRECTIONS, default=None,
                       help="default: the objective's own sense (accuracy is maximised)")
    group.add_argument("--pruner", choices=PRUNERS, default=None,
                       help="stop clearly worse trials early: median (the default of a "
                       "search), halving (successive halving) or none (the default of a grid)")
    group.add_argument("--storage", default=None, metavar="URL",
                       help="an Optuna storage URL (postgresql://..., mysql://...); default "
                       "SQLite in OUT")
    group.add_argument("--trial-on", default="", metavar="NAMES",
                       help="run each trial whole on one machine: comma-separated registered "
                       "machines (local = this one, all = this one and every registered one; "
                       "a name twice takes two trials at once; "
                       "on GPUs, a trial per free GPU group of each); as many trials at once "
                       "as names unless --parallel says")
    group.add_argument("--search-seed", type=int, default=None,
                       help="seed of the search's sampler (default 0)")
    group.add_argument("--export", type=Path, default=None, metavar="DIR",
                       help="write the sweep in OUT as a folder of bundles (one a trial) plus "
                       "rerun.py, which reruns them without dtgui; runs nothing")
    group.add_argument("--export-best", type=int, default=0, metavar="N",
                       help="with --export: only the N best finished trials (0: every "
                       "trial)")
    add_export_options(sweep)


def joined_params(argv: Sequence[str]) -> list[str]:
    """The command line with `--param --option=SPACE` (a script's argument, as docs/sweeps.md
    writes it) given as `--param=--option=SPACE`: argparse takes a value starting with `-`
    for an option of its own and refuses it."""
    out: list[str] = []
    taken = False
    for index, arg in enumerate(argv):
        if taken:
            taken = False
            continue
        if arg == "--":
            return out + list(argv[index:])
        if arg == "--param" and index + 1 < len(argv) and argv[index + 1].startswith("-"):
            out.append(f"--param={argv[index + 1]}")
            taken = True
        else:
            out.append(arg)
    return out


def _run_name(args: argparse.Namespace) -> str:
    if args.run_name:
        return str(args.run_name)
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", args.out.resolve().name).strip("-._")
    return name[:70] or "sweep"


def _spec(args: argparse.Namespace) -> SweepSpec:
    from dtgui.launch.gpus.free_slots import expand_names

    params = []
    problems: list[str] = []
    for text in args.param:
        try:
            params.append(parse_param(text))
        except SweepError as exc:
            problems += exc.problems
    if problems:
        raise SweepError(problems)
    machines = [n.strip() for n in args.trial_on.split(",") if n.strip()]
    return SweepSpec(params=tuple(params), trials=args.trials or 10,
                     parallel=args.parallel or len(expand_names(machines)) or 1,
                     search=args.search or "tpe",
                     objective=args.objective or DEFAULT_OBJECTIVE,
                     direction=args.direction or "", pruner=args.pruner or default_pruner(args.search or "tpe"),
                     storage=args.storage or "", seed=args.search_seed or 0,
                     trial_on=tuple(machines))


def _as_jobs(args: argparse.Namespace, spec: SweepSpec, plan: Plan,
             options: KindOptions) -> SweepSpec:
    """The sweep with each trial one job of the kind whose options ask for it (kept in
    sweep.json)."""
    from dtgui.launch.drivers import DRIVERS

    refusal = options.trial_refusal(args)
    if refusal:
        raise SweepError([refusal])
    errors = DRIVERS[options.kind].errors if options.kind in DRIVERS else ()
    try:
        job = options.job(args, plan)
    except errors as exc:
        text = str(exc).rstrip(".")
        raise SweepError([f"{text[:1].upper()}{text[1:]}."]) from exc
    return dataclasses.replace(spec, job=job)


def _resumed(args: argparse.Namespace) -> tuple[SweepSpec, Plan]:
    """The sweep in OUT, with the counts given now (written back when they changed)."""
    from dtgui.launch.drivers import job_readers

    spec, plan = load_sweep(args.out, job_readers())
    if args.param and tuple(parse_param(p) for p in args.param) != spec.params:
        over = ", ".join(p.to_text() for p in spec.params)
        raise SweepError([f"{args.out} holds a sweep over {over}: its parameters stay (leave "
                          "out --param to go on with it, or choose a new folder)."])
    changes = {k: v for k, v in (("trials", args.trials), ("parallel", args.parallel)) if v}
    if any(getattr(spec, k) != v for k, v in changes.items()):
        spec = dataclasses.replace(spec, **changes)
        save_sweep(args.out, spec, plan)
    return spec, plan


def cmd_sweep(args: argparse.Namespace, checked_plan: CheckedPlan) -> int:
    """`dtgui sweep`; `checked_plan` reads the run the export options describe."""
    from dtgui.cli.machines import ExportOptionError, place_from_args, wants_machines
    from dtgui.launch.sweeps.sweep_process import run_sweep
    from dtgui.launch.sweeps.sweep_queue import prepare_sweep

    if args.export is not None:
        return _export(args)
    try:
        if (args.out / SWEEP_FILE).is_file():
            spec, plan = _resumed(args)
        else:
            spec = _spec(args)
            plan = checked_plan(args).with_changes(run_name=_run_name(args))
            options = chosen_options(args)
            if options is not None:  # each trial one job of that kind
                spec = _as_jobs(args, spec, plan, options)
            elif args.trial_on and wants_machines(args):
                raise SweepError(["--trial-on runs each trial on one machine: leave out the "
                                  "placement options (--on, --workers-on ...)."])
            elif wants_machines(args):  # every trial on the machines named
                plan, notes = place_from_args(plan, args)
                for note in notes:
                    print(f"{PROG}: note: {note}", file=sys.stderr)
            prepare_sweep(args.out, spec, plan)
        return run_sweep(args.out, spec, plan, sys.stdout, sys.stderr)
    except (SweepError, ExportOptionError) as exc:
        for problem in exc.problems:
            print(f"{PROG}: {problem}", file=sys.stderr)
        return 2


def _export(args: argparse.Namespace) -> int:
    from dtgui.core.sweeps.sweep_export import RERUN_SCRIPT, export_sweep

    try:
        if not (args.out / SWEEP_FILE).is_file():
            raise SweepError([f"{args.out} holds no sweep to export."])
        bundles = export_sweep(args.out, args.export, best=max(0, args.export_best))
    except SweepError as exc:
        for problem in exc.problems:
            print(f"{PROG}: {problem}", file=sys.stderr)
        return 2
    print(f"wrote {len(bundles)} trial bundle(s) to {args.export}; rerun them without dtgui "
          f"with: python3 {args.export / RERUN_SCRIPT}")
    return 0
