"""`dtgui export OUT --slurm CLUSTER ...`: a bundle that is one Slurm job. `dtgui run OUT` of
such a bundle goes through the launch pipeline as every run does (`launch_bundle`: the Slurm
driver finds its cluster, checks the job with `sinfo`, copies it to a registered cluster's
shared filesystem, submits and follows it)."""

from __future__ import annotations

import argparse
import sys

from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.slurm import LOCAL_CLUSTER, SlurmDefaults, SlurmError, SlurmJob, job_from_args


def add_slurm_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "a Slurm cluster",
        "Write the run as one Slurm job (job.sbatch in the bundle). CLUSTER is a registered "
        "cluster (its defaults apply), or `local` when this machine is the login node. The "
        "tasks (workers, or chief + servers + workers) are nodes x tasks per node; "
        "--python CLUSTER=PATH names the nodes' Python.")
    group.add_argument("--slurm", default="", metavar="CLUSTER")
    group.add_argument("--partition", default=None, metavar="P")
    group.add_argument("--nodes", type=int, default=None, metavar="N")
    group.add_argument("--tasks-per-node", type=int, default=None, metavar="T")
    group.add_argument("--gpus-per-node", type=int, default=None, metavar="G")
    group.add_argument("--time", default=None, metavar="HH:MM:SS", help="the job's time limit")
    group.add_argument("--account", default=None, metavar="A")
    group.add_argument("--requeue", action="store_true",
                       help="Slurm requeues the job after a node failure or preemption; it "
                            "resumes from the last checkpoint")


def fill_counts(args: argparse.Namespace) -> None:
    """Workers from nodes x tasks per node when --workers is not given (before the counts
    are resolved)."""
    strategy = Strategy(args.strategy)
    if args.workers is None and strategy.multi_process:
        total = (args.nodes or 2) * (args.tasks_per_node or 1)
        extra = (1 if strategy.has_coordinator else 0) + \
            ((args.ps or 1) if "ps" in strategy.task_types else 0)
        args.workers = max(total - extra, 1)


def _cluster_defaults(name: str) -> tuple[SlurmDefaults, str]:
    """A registered cluster's defaults and Python; SlurmError when it is none."""
    if name == LOCAL_CLUSTER:
        return SlurmDefaults(), sys.executable
    from dtgui.core.machines.registry import MachineRegistry

    registry = MachineRegistry()
    registry.load()
    machine = registry.find(name)
    if machine is None or machine.slurm is None:
        known = [m.name for m in registry.machines() if m.slurm is not None]
        raise SlurmError(f"no Slurm cluster is registered as {name!r} (registered: "
                         f"{', '.join(known) or 'none'}; `local` = this machine is the login "
                         "node)")
    return machine.slurm, machine.python


def job_from(args: argparse.Namespace, plan: Plan) -> SlurmJob:
    """The job the options ask for, for the plan's tasks. Raises SlurmError."""
    defaults, python = _cluster_defaults(args.slurm)
    for item in args.python:
        name, _, path = item.partition("=")
        if name == args.slurm:
            python = path
    from dtgui.core.plans.placement import task_layout

    count = len(task_layout(plan))
    per_node = args.tasks_per_node or (1 if args.nodes is None else max(count // args.nodes, 1))
    nodes = args.nodes if args.nodes is not None else max(count // per_node, 1)
    job = job_from_args(args.slurm, defaults, nodes=nodes, tasks_per_node=per_node,
                        gpus_per_node=args.gpus_per_node, partition=args.partition,
                        time_limit=args.time, account=args.account, python=python,
                        requeue=args.requeue)
    if job.tasks != count:
        raise SlurmError(f"the run has {count} task(s) but --nodes {job.nodes} x "
                         f"--tasks-per-node {job.tasks_per_node} = {job.tasks}: make them "
                         "equal (or leave --workers out)")
    return job


def export_slurm(plan: Plan, args: argparse.Namespace) -> int:
    from dtgui.core.bundles.bundle import BundleError
    from dtgui.core.plans.plan import PlanError
    from dtgui.core.slurm_bundle import render_slurm_bundle

    try:
        job = job_from(args, plan)
        bundle = render_slurm_bundle(plan, args.outdir, job)
    except (SlurmError, BundleError, PlanError) as exc:
        print(f"dtgui export: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {bundle.path} ({len(bundle.plan.tasks)} task(s) as one Slurm job: "
          f"{job.nodes} node(s) x {job.tasks_per_node}); submit it with `dtgui run "
          f"{bundle.path}`, or by hand on the login node: cd {bundle.path}; sbatch job.sbatch")
    return 0
