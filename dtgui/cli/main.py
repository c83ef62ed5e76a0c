"""Command line: `dtgui` (GUI), `dtgui export OUTDIR`, `dtgui run OUTDIR`, `dtgui resume RUN`,
`dtgui sweep OUT`, `dtgui queue`, `dtgui runs ...`, `dtgui install-desktop`."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from dtgui import __version__
from dtgui.cli.desktop import add_install_desktop, cmd_install_desktop
from dtgui.cli.kind_options import chosen_options, kind_options
from dtgui.cli.machines import (
    ExportOptionError,
    add_machine_options,
    resolve_counts,
    wants_machines,
)
from dtgui.cli.script import add_script_options, script_model_from_args, script_refusal
from dtgui.cli.tracking import add_mlflow_option, apply_mlflow_option
from dtgui.core.measure.bottleneck import CpuLoad, StepSplit, plan_facts, verdict
from dtgui.core.measure.memory import DeviceMemory
from dtgui.core.plans.plan import (
    COMMUNICATIONS,
    GRAD_COMPRESSIONS,
    LR_SCHEDULES,
    OPTIMIZERS,
    PRECISIONS,
    Communication,
    DemoModel,
    DeviceKind,
    GradCompression,
    LrSchedule,
    ModelFile,
    Optimizer,
    Plan,
    PlanError,
    PlanModel,
    Precision,
    validate,
)
from dtgui.core.plans.strategies import STRATEGIES, Strategy
from dtgui.core.runs.run_state import RunState

if TYPE_CHECKING:
    from dtgui.launch.controller import RunController


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except empty ones (None, "", [])."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, "", []):
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dtgui",
        description="Point-and-click distributed TensorFlow training. With no command, "
        "opens the GUI.",
    )
    parser.add_argument("--version", action="version", version=f"dtgui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_mlflow_option(parser)
    add_mlflow_option(sub.add_parser("gui", help="open the GUI (the default)"))

    export = sub.add_parser(
        "export", help="write a run bundle that reproduces a run without dtgui",
        formatter_class=_HelpFormatter,
    )
    export.add_argument("outdir", type=Path, help="directory to create (must be new or empty)")
    add_export_options(export)

    run = sub.add_parser("run", help="run a bundle on this machine (a Slurm bundle: submit it "
                         "here, the login node, and follow the job), headless, printing progress")
    run.add_argument("bundle", type=Path, help="a directory written by dtgui export")
    run.add_argument("--when-free", action="store_true",
                     help="do not start it now: queue it to start in the background when its "
                     "machines are free (as dtgui queue add BUNDLE)")
    add_mlflow_option(run)
    from dtgui.cli.profile import add_profile
    from dtgui.cli.resume import add_resume
    from dtgui.cli.sweep import add_sweep

    add_resume(sub)
    add_profile(sub)
    add_sweep(sub, _HelpFormatter, add_export_options)
    from dtgui.cli.queue import add_queue

    add_queue(sub)
    from dtgui.cli.runs import add_runs

    add_runs(sub, _HelpFormatter)
    add_install_desktop(sub)
    return parser


def add_export_options(export: argparse.ArgumentParser) -> None:
    """The options that describe a run (dtgui export, dtgui sweep)."""
    export.add_argument("--strategy", choices=sorted(STRATEGIES), default=Strategy.MIRRORED.value)
    export.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                        help="replicas on logical CPU devices, or on GPUs")
    export.add_argument("--replicas", type=int, default=2,
                        help="replicas per task (logical CPU devices or GPUs)")
    export.add_argument("--workers", type=int, default=None,
                        help="worker processes (multi_worker_mirrored, parameter_server); "
                        "default 2, or one per machine of --workers-on")
    export.add_argument("--ps", type=int, default=None,
                        help="parameter servers (parameter_server); default 1, or one per "
                        "machine of --ps-on")
    export.add_argument("--precision", choices=PRECISIONS, default="float32")
    export.add_argument("--xla", action="store_true", help="compile the step with XLA")
    export.add_argument("--communication", choices=COMMUNICATIONS, default="auto")
    export.add_argument("--grad-compression", choices=GRAD_COMPRESSIONS, default="none",
                        help="the dtype gradients cross the network in (cast before the "
                        "all-reduce, applied in float32): mirrored, multi_worker_mirrored")
    export.add_argument("--bytes-per-pack", type=int, default=0,
                        help="the all-reduce's pack size in bytes (0: TensorFlow's); "
                        "multi_worker_mirrored")
    export.add_argument("--steps", type=int, default=100)
    export.add_argument("--steps-per-epoch", type=int, default=25)
    export.add_argument("--batch-size", type=int, default=32, help="per-replica batch size")
    export.add_argument("--lr", type=float, default=0.001, help="learning rate")
    export.add_argument("--seed", type=int, default=42)
    export.add_argument("--no-determinism", action="store_true",
                        help="allow non-deterministic ops (faster on GPU; always so with "
                        "parameter_server: asynchronous training is not repeatable, and "
                        "deterministic ops would keep its steps from being timed)")
    export.add_argument("--checkpoint-every", type=int, default=50, help="steps; 0 = off")
    export.add_argument("--optimizer", choices=OPTIMIZERS, default="adam")
    export.add_argument("--weight-decay", type=float, default=0.0,
                        help="decoupled weight decay (adamw, sgd, rmsprop); 0 = none")
    export.add_argument("--momentum", type=float, default=0.9, help="sgd momentum")
    export.add_argument("--lr-schedule", choices=LR_SCHEDULES, default="constant",
                        help="cosine: decays to 0 over the steps; warmup_cosine: linear from 0 "
                        "over --warmup-steps, then cosine; step: x --lr-step-factor every "
                        "--lr-step-every steps")
    export.add_argument("--warmup-steps", type=int, default=0)
    export.add_argument("--lr-step-every", type=int, default=1000)
    export.add_argument("--lr-step-factor", type=float, default=0.1)
    export.add_argument("--clip-norm", type=float, default=0.0,
                        help="clip the gradient's global norm (0 = off)")
    export.add_argument("--grad-accumulation", type=int, default=1,
                        help="micro-batches summed per update (1 = off)")
    export.add_argument("--validate-every", type=int, default=0,
                        help="steps between validations; 0 (default) = every epoch")
    export.add_argument("--save-best", action="store_true",
                        help="also keep the model at its best validation loss")
    export.add_argument("--steps-per-call", type=int, default=0,
                        help="training steps per call to the device; 0 (default) = sized "
                        "while training to about 0.2 s a call")
    export.add_argument("--profile-steps", type=step_span, default=(0, 0), metavar="FIRST-LAST",
                        help="capture TensorFlow's profiler on every task from step FIRST to "
                        "LAST (each task's trace under output/tensorboard/TASK: TensorBoard's "
                        "Profile tab; under ParameterServer the coordinator captures its workers; "
                        "not a script)")
    export.add_argument("--model", type=Path, default=None,
                        help="your Python file with build_model() and make_dataset()")
    export.add_argument("--no-check", action="store_true",
                        help="do not check the model file in a TensorFlow subprocess first")
    export.add_argument("--tpu-address", default="", help="grpc://HOST:PORT (strategy tpu)")
    export.add_argument("--run-name", default="", help="default: <strategy>-<time>")
    add_machine_options(export)
    add_script_options(export)
    for options in kind_options():  # each kind's own (a cluster's job)
        options.add(export)


def plan_from_args(args: argparse.Namespace) -> Plan:
    strategy = Strategy(args.strategy)
    model: PlanModel = ModelFile(str(args.model.resolve())) if args.model else DemoModel()
    return Plan(
        run_name=args.run_name or f"{strategy}-{time.strftime('%Y%m%d-%H%M%S')}",
        strategy=strategy,
        device_kind=DeviceKind(args.device),
        replicas_per_task=_replicas(strategy, args),
        workers=args.workers if strategy.multi_process else 1,
        parameter_servers=args.ps if "ps" in strategy.task_types else 0,
        precision=Precision(args.precision),
        xla=args.xla,
        communication=Communication(args.communication),
        grad_compression=GradCompression(args.grad_compression),
        bytes_per_pack=args.bytes_per_pack,
        per_replica_batch=args.batch_size,
        steps=args.steps,
        steps_per_epoch=args.steps_per_epoch,
        learning_rate=args.lr,
        seed=args.seed,
        deterministic=not args.no_determinism and not strategy.asynchronous,
        checkpoint_every=args.checkpoint_every,
        steps_per_call=args.steps_per_call,
        optimizer=Optimizer(args.optimizer),
        weight_decay=args.weight_decay,
        momentum=args.momentum,
        lr_schedule=LrSchedule(args.lr_schedule),
        warmup_steps=args.warmup_steps,
        lr_step_every=args.lr_step_every,
        lr_step_factor=args.lr_step_factor,
        clip_norm=args.clip_norm,
        grad_accumulation=args.grad_accumulation,
        validate_every=args.validate_every,
        save_best=args.save_best,
        profile_steps=args.profile_steps,
        model=model,
        tpu_address=args.tpu_address,
    )


def step_span(text: str) -> tuple[int, int]:
    """FIRST-LAST (whole steps) as (FIRST, LAST); argparse says what is wrong."""
    first, dash, last = text.partition("-")
    if not dash or not first.strip().isdigit() or not last.strip().isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not FIRST-LAST (e.g. 100-120)")
    return int(first), int(last)


def _replicas(strategy: Strategy, args: argparse.Namespace) -> int:
    if strategy.one_replica or strategy.one_replica_per_worker:
        return 1
    if strategy.collective_across_workers and args.device == "cpu":
        return 1  # TensorFlow's collectives use one CPU device per worker process
    return int(args.replicas)


def cmd_export(args: argparse.Namespace) -> int:
    from dtgui.core.bundles.bundle import BundleError, render_bundle
    from dtgui.launch.checks.model_check import check_bundled_model

    try:
        plan = checked_plan(args)
    except ExportOptionError as exc:
        return _refuse(exc.problems)
    options = chosen_options(args)
    if options is not None:  # one job of that kind: it places the tasks
        return options.export(plan, args)
    try:
        placed, notes = _place_for_export(plan, args)
    except ValueError as exc:
        return _refuse(getattr(exc, "problems", [str(exc)]))
    try:
        bundle = render_bundle(placed, args.outdir)
    except (BundleError, PlanError) as exc:
        print(f"dtgui export: {exc}", file=sys.stderr)
        return 2
    if args.model and not args.no_check:  # the bundle's copy, as the run will import it
        problem = check_bundled_model(bundle)
        if problem:
            shutil.rmtree(bundle.path, ignore_errors=True)
            print(f"dtgui export: {problem}", file=sys.stderr)
            return 2
    for note in notes:
        print(f"dtgui export: note: {note}", file=sys.stderr)
    run_sh = shlex.quote(str(bundle.path / "run.sh"))
    if bundle.plan.machines:
        on = ", ".join(f"{m} ({', '.join(t.task_id for t in bundle.plan.tasks if t.machine_name == m)})"
                       for m in bundle.plan.machine_names)
        print(f"wrote {bundle.path} ({len(bundle.plan.tasks)} task(s) on {on}); copy it to "
              f"each machine and run `bash run.sh MACHINE` there: see "
              f"{shlex.quote(str(bundle.path / 'README.md'))}")
    else:
        print(f"wrote {bundle.path} ({len(bundle.plan.tasks)} task(s)); run it with: "
              f"bash {run_sh}")
    return 0


def checked_plan(args: argparse.Namespace) -> Plan:
    """The plan the export options describe, checked and not yet placed; ExportOptionError
    holds every problem."""
    options = chosen_options(args)
    if options is not None:
        options.fill_counts(args)
    problems = resolve_counts(args)
    script_model, script_problems = script_model_from_args(args)  # --script: the user's own
    if problems or script_problems:
        raise ExportOptionError(problems + script_problems)
    plan = plan_from_args(args)
    if script_model is not None:
        plan = plan.with_changes(model=script_model)
        if not args.no_check and (refusal := script_refusal(plan)):
            raise ExportOptionError([refusal])
    problems = validate(plan)
    if problems:
        raise ExportOptionError(problems)
    return plan


def _refuse(problems: list[str]) -> int:
    for p in problems:
        print(f"dtgui export: {p}", file=sys.stderr)
    return 2


def _place_for_export(plan: Plan, args: argparse.Namespace) -> tuple[Plan, list[str]]:
    """On the machines the options name, else on this machine (free ports, or from
    --base-port). Raises ValueError (ExportOptionError with `problems`)."""
    from dtgui.cli.machines import check_base_port, place_from_args
    from dtgui.core.plans.placement import place_local, task_layout

    if wants_machines(args):
        return place_from_args(plan, args)
    if args.base_port is None:
        return place_local(plan), []
    count = len(task_layout(plan))
    problem = check_base_port(args.base_port, count)
    if problem:
        raise ExportOptionError([problem])
    placed = place_local(plan, list(range(args.base_port, args.base_port + count)))
    notes = [f"ports from {args.base_port} were not checked: make sure they are free when "
             "the bundle runs."] if any(t.port for t in placed.tasks) else []
    return placed, notes


def cmd_run(args: argparse.Namespace) -> int:
    from dtgui.cli.queue import queue_bundle
    from dtgui.core.bundles.bundle import Bundle, BundleError
    from dtgui.core.plans.plan import PlanError
    from dtgui.core.runs.queue_file import QueueError
    from dtgui.launch.controller import LaunchError
    from dtgui.launch.drivers import run_errors
    from dtgui.launch.queue.run_queue import resume_queue
    from dtgui.launch.start.pipeline import launch_bundle

    if args.when_free:
        return queue_bundle(args.bundle)
    refusals: tuple[type[Exception], ...] = (BundleError, PlanError, LaunchError,
                                             *run_errors())  # a kind's, e.g. its job's
    try:
        bundle = Bundle.open(args.bundle)
        controller = launch_bundle(bundle)
    except refusals as exc:
        print(f"dtgui run: {exc}", file=sys.stderr)
        return 2
    finally:  # a dtgui entry: a queue left without its process gets one again (after this
        # run holds its machines: its record is written)
        with contextlib.suppress(QueueError, OSError):  # a damaged queue: dtgui queue says
            resume_queue()
    return follow(controller)


def follow(controller: RunController) -> int:
    """Print a started run's progress until it ends (Ctrl-C stops it); its exit code."""
    from dtgui.core.plans.plan_text import script_summary, script_text
    from dtgui.launch.drivers import started_lines

    for line in started_lines(controller.record, controller.executors):
        print(line, flush=True)
    def stop(*_: object) -> None:
        if controller.state is RunState.RUNNING:
            print(f"stopping: every task saves a checkpoint at the step it reached (at most "
                  f"{controller.policy.save_grace:g} s)", flush=True)
        controller.request_stop()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    plan = controller.bundle.plan
    if plan.script is not None:  # its own steps: the plan's options are only hints to it
        print(f"running {plan.run_name}: {len(plan.tasks)} task(s), your "
              f"{script_summary(plan)}; Ctrl-C stops every task\n{script_text(plan)}")
    else:
        print(f"running {plan.run_name}: {len(plan.tasks)} task(s), "
              f"{plan.steps} steps; Ctrl-C stops every task")
    last_step = -1
    last_epoch = 0
    told = ""
    notes = {task: 0 for task in controller.training_tasks}  # their log lines read
    while not controller.wait(0.5):
        say_profiles(controller, notes)
        snap = controller.metrics.snapshot()
        if plan.script is not None and snap.script_progress.unit:  # what the script tells
            progress = snap.script_progress
            if progress.text() != told:
                told = progress.text()
                losses = "  ".join(f"{task}={ys[-1]:.4g}" for task, (_, ys)
                                   in controller.metrics.scalars.loss_series().items() if len(ys))
                left = progress.seconds_left()
                print(told + (f"  loss {losses}" if losses else "")
                      + (f"  ~{left:.0f} s left" if left and progress.done < progress.total
                         else ""), flush=True)
        elif snap.step != last_step and snap.step:
            last_step = snap.step
            losses = "  ".join(
                f"r{rid}={ys[-1]:.4g}" for rid, (_, ys) in snap.replica_loss.items() if len(ys)
            )
            print(f"step {snap.step}/{snap.total_steps}  {losses}", flush=True)
        elif snap.epoch != last_epoch and not snap.replica_loss:  # a script's epoch scalars
            last_epoch = snap.epoch
            losses = "  ".join(f"{task}={ys[-1]:.4g}" for task, (_, ys)
                               in controller.metrics.scalars.loss_series().items() if len(ys))
            print(f"epoch {snap.epoch}  loss {losses}", flush=True)
    say_profiles(controller, notes)
    snap = controller.metrics.snapshot()
    for tid, state in sorted(snap.tasks.items()):
        print(f"  {tid}: {state.status}" + (f" ({state.error})" if state.error else ""))
    print(f"run {controller.state}: {controller.message}")
    loss = controller.final_loss
    if loss is not None:  # a run that did not finish has no final loss
        print(f"{loss_words(controller.state)} {loss:.4g}")
    print(limit_line(plan, snap.splits.values(), snap.memory.devices(), snap.loads))
    return {RunState.FINISHED: 0, RunState.STOPPED: 130}.get(controller.state, 1)


def say_profiles(controller: RunController, seen: dict[str, int]) -> None:
    """Print what the training tasks said of profiles since `seen` (their lines read, kept
    up to date): the plan's profile steps and those asked while it runs, when and where
    their traces were written."""
    from dtgui.core.measure.profile_answers import profile_notes

    for task in seen:
        lines, seen[task] = controller.metrics.log_lines_since(task, seen[task])
        for note in profile_notes(lines):
            print(f"{task}: {note}", flush=True)


def loss_words(state: str) -> str:
    """How a run's last training loss is named: the final loss only of a finished run."""
    if state == RunState.FINISHED:
        return "final loss"
    return "last loss before the stop" if state == RunState.STOPPED \
        else "last loss before the failure"


def limit_line(plan: Plan, splits: Iterable[StepSplit], memory: Iterable[DeviceMemory],
               loads: Iterable[CpuLoad] = ()) -> str:
    """What limited the run, with the figure and what to change (the dashboard's verdict)."""
    found = verdict(splits, plan_facts(plan), memory, loads)
    if found.known:
        return f"limited by: {found.text}"
    if plan.script is not None:
        return ("limited by: not measured (your script gives no split: call "
                "dtgui_worker.report(step, loss) each step; docs/own-scripts.md)")
    return ("limited by: not measured (the run was too short: measuring its step would have "
            "taken more than 5 % of its training time)")


def _report_plugins() -> None:
    """Each target plugin that cannot be used, one line on stderr (the others work)."""
    from dtgui.launch.drivers import plugin_problems

    for problem in plugin_problems():
        print(f"dtgui: {problem}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Every command; a reader that closed its end of the pipe (`dtgui runs list | head -1`)
    ends it quietly: what it asked for was printed."""
    try:
        return _command(argv)
    except BrokenPipeError:
        # the interpreter flushes stdout once more on exit: into nothing, not the closed pipe
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 0


def _command(argv: list[str] | None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if "--param" in argv:  # a script's argument as a sweep's parameter: `--param --x=SPACE`
        from dtgui.cli.sweep import joined_params

        argv = joined_params(argv)
    args = build_parser().parse_args(argv)
    apply_mlflow_option(args)
    if args.command is not None:
        _report_plugins()
    if args.command == "export":
        return cmd_export(args)
    if args.command == "run":
        return cmd_run(args)
    if args.command == "profile":
        from dtgui.cli.profile import cmd_profile

        return cmd_profile(args)
    if args.command == "resume":
        from dtgui.cli.resume import cmd_resume

        return cmd_resume(args, follow)
    if args.command == "sweep":
        from dtgui.cli.sweep import cmd_sweep

        return cmd_sweep(args, checked_plan)
    if args.command == "queue":
        from dtgui.cli.queue import cmd_queue

        return cmd_queue(args)
    if args.command == "runs":
        from dtgui.cli.runs import cmd_runs

        return cmd_runs(args)
    if args.command == "install-desktop":
        return cmd_install_desktop(args)
    from dtgui.ui.app import run_gui

    return run_gui()


if __name__ == "__main__":
    sys.exit(main())
