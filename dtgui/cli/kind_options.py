"""A kind's command-line options: the `KindOptions` protocol.

`dtgui export` and `dtgui sweep` add every registered kind's options (its registration's
`options` hook, `dtgui.kinds`); when a kind's options ask for one of its jobs (`chosen`), the
export writes the run as that job and a sweep runs each trial as one. A kind's options:

* `add`: its argument group on a command's parser;
* `chosen`: whether the parsed arguments ask for a job of this kind (its own option naming where the job goes);
* `fill_counts`: the run's counts the job implies, before they are resolved;
* `job`: the job the arguments ask for, for a checked plan (raises one of its driver's
  `errors`, whose message says why);
* `export`: the plan written as that job (the command's exit code, its lines printed);
* `trial_refusal`: why a sweep's options do not go with trials as jobs ("" = they do).
"""

from __future__ import annotations

import argparse

from dtgui.core.plans.plan import Plan
from dtgui.core.target_job import TargetJob


class KindOptions:
    """One kind's command-line options; subclasses set `kind` and override what applies."""

    kind = ""

    def add(self, parser: argparse.ArgumentParser) -> None:
        """Its options, on a command's parser."""

    def chosen(self, args: argparse.Namespace) -> bool:
        return False

    def fill_counts(self, args: argparse.Namespace) -> None:
        """The counts (workers...) its job implies when they are not given."""

    def job(self, args: argparse.Namespace, plan: Plan) -> TargetJob:
        """The job the arguments ask for (a sweep's trials are each one)."""
        raise NotImplementedError

    def export(self, plan: Plan, args: argparse.Namespace) -> int:
        raise NotImplementedError

    def trial_refusal(self, args: argparse.Namespace) -> str:
        return ""


def kind_options() -> list[KindOptions]:
    """Every registered kind's options (those that load; a failure is reported by name)."""
    from dtgui.kinds import hooks, report_plugin

    found = []
    for kind, options in hooks("options").items():
        made = options() if isinstance(options, type) else options
        if isinstance(made, KindOptions):
            found.append(made)
        else:
            report_plugin(kind, "its command-line options are no KindOptions")
    return found


def chosen_options(args: argparse.Namespace) -> KindOptions | None:
    """The kind whose options the arguments ask for a job of (None: the run's processes)."""
    return next((o for o in kind_options() if o.chosen(args)), None)
