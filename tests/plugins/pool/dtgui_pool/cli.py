"""The pool's command-line options: `dtgui export OUT --pool NAME`, `dtgui sweep --pool NAME`."""

from __future__ import annotations

import argparse
import sys

from dtgui.cli.kind_options import KindOptions
from dtgui.core.machines.registry import MachineRegistry
from dtgui.core.plans.plan import Plan
from dtgui_pool.job import KIND, PoolError, PoolJob, pool_settings


class PoolOptions(KindOptions):
    kind = KIND

    def add(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("a pool", "Send the run to a registered pool.")
        group.add_argument("--pool", default="", metavar="NAME")

    def chosen(self, args: argparse.Namespace) -> bool:
        return bool(getattr(args, "pool", ""))

    def job(self, args: argparse.Namespace, plan: Plan) -> PoolJob:
        machine = MachineRegistry().find(args.pool)
        if pool_settings(machine) is None:
            raise PoolError(f"no pool is registered as {args.pool!r}")
        return PoolJob(args.pool)

    def export(self, plan: Plan, args: argparse.Namespace) -> int:
        from dtgui.launch.drivers import export_job

        try:
            path, how = export_job(plan, args.outdir, self.job(args, plan))
        except PoolError as exc:
            print(f"dtgui export: {exc}", file=sys.stderr)
            return 2
        print(f"wrote {path} for the pool {args.pool}; run it with `dtgui run {path}`, or {how}")
        return 0

    def trial_refusal(self, args: argparse.Namespace) -> str:
        return "--pool runs every trial in the pool: leave out --trial-on" if args.trial_on \
            else ""
