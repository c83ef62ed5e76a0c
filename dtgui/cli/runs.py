"""`dtgui runs list|show|delete|export|tag|export-mlflow`: the Runs page on the command line (docs/cli.md).

RUN is a run's folder, its folder name, its run id or its name; a name several runs share,
or one no run has, is said with what matches.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from dtgui.cli.tracking import add_export_mlflow, cmd_export_mlflow
from dtgui.core.plans.strategies import STRATEGIES
from dtgui.core.runs.run_index import SWEEP, RunRow, find, significant

SWEEP_COMMANDS = ("show", "tag")  # the others act on one run's folder
LIST_COLUMNS = ("name", "state", "strategy", "where", "started", "steps", "final loss",
                "best val", "tags")


def add_runs(sub: argparse._SubParsersAction[argparse.ArgumentParser],
             formatter: type[argparse.HelpFormatter]) -> None:
    runs = sub.add_parser("runs", help="list, show, delete, export or tag past runs",
                          formatter_class=formatter)
    verbs = runs.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    add_export_mlflow(verbs)
    listing = verbs.add_parser("list", help="the runs and sweeps, newest first")
    listing.add_argument("--json", action="store_true", help="one JSON array of every row")
    listing.add_argument("--filter", default="", metavar="TEXT",
                         help="only rows whose name, state, strategy, machines, tags or note "
                         "hold every word of TEXT")
    listing.add_argument("--archived", action="store_true", help="archived runs too")
    show = verbs.add_parser("show", help="one run's or sweep's record, notes, result, "
                            "settings and its stretches of training")
    show.add_argument("run", metavar="RUN", help="name (as `runs list` prints it), folder, "
                      "or run id")
    delete = verbs.add_parser("delete", help="delete a run's folder and record")
    delete.add_argument("run", metavar="RUN")
    delete.add_argument("--remote", action="store_true",
                        help="also its copies on the machines or the cluster's shared "
                        "filesystem (when one cannot be reached, nothing is deleted)")
    delete.add_argument("--yes", action="store_true", help="do not ask")
    export = verbs.add_parser("export", help="write a past run's bundle to DIR")
    export.add_argument("run", metavar="RUN")
    export.add_argument("dir", type=Path, metavar="DIR", help="a new or empty directory")
    tag = verbs.add_parser("tag", help="add a tag to a run (or remove it: --remove)")
    tag.add_argument("run", metavar="RUN")
    tag.add_argument("tag", metavar="TAG")
    tag.add_argument("--remove", action="store_true", help="remove the tag instead")


def _when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp)) if stamp else ""


def _strategy(key: str) -> str:
    info = STRATEGIES.get(key)
    return info.title if info else key


def _cells(row: RunRow) -> list[str]:
    prefix = "  " if row.parent else ""
    return [prefix + row.name, row.state_text, _strategy(row.strategy), row.where,
            _when(row.started), "" if row.steps is None else str(row.steps),
            significant(row.final_loss), significant(row.best_val), ", ".join(row.tags)]


def _rows() -> list[RunRow]:
    from dtgui.launch.run_admin import list_rows

    return list_rows()


def _one(text: str, command: str) -> RunRow | None:
    rows = [r for r in _rows() if r.kind != SWEEP or command in SWEEP_COMMANDS]
    found = find(rows, text)
    if len(found) == 1:
        return found[0]
    if not found:
        close = [r for r in rows if text.lower() in r.text()][:10]
        hint = (" Runs like it: " + ", ".join(f"{r.name} ({r.folder})" for r in close)
                if close else " `dtgui runs list` shows every run.")
        print(f"dtgui runs {command}: no run is called {text!r}.{hint}", file=sys.stderr)
    else:
        print(f"dtgui runs {command}: {len(found)} runs are called {text!r}; name one by its "
              "folder or run id:", file=sys.stderr)
        for r in found:
            print(f"  {r.run_id}  {r.folder}  ({r.state}, {_when(r.started)})",
                  file=sys.stderr)
    return None


def cmd_runs(args: argparse.Namespace) -> int:
    command = args.runs_command
    if command == "list":
        return _list(args)
    if command == "export-mlflow":
        return cmd_export_mlflow(args)
    row = _one(args.run, command)
    if row is None:
        return 2
    if command == "show":
        return _show(row)
    if command == "delete":
        return _delete(row, args)
    if command == "export":
        return _export_to(row, args.dir)
    return _tag(row, args.tag, args.remove)


def _list(args: argparse.Namespace) -> int:
    rows = _rows()
    words = args.filter.lower().split()
    rows = [r for r in rows if (args.archived or not r.archived) and r.matches(words)]
    if args.json:
        print(json.dumps([r.to_dict() for r in rows], indent=1, ensure_ascii=False))
        return 0
    table = [list(LIST_COLUMNS), *(_cells(r) for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(LIST_COLUMNS))]
    for line in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    return 0


def _show(row: RunRow) -> int:
    print(f"{row.name}  ({row.kind})")
    for label, value in (("folder", row.folder), ("run id", row.run_id),
                         ("state", row.state_text
                          + (f": {row.message}" if row.message else "")),
                         ("strategy", _strategy(row.strategy)), ("where", row.where),
                         ("started", _when(row.started)), ("ended", _when(row.ended)),
                         ("steps", "" if row.steps is None else f"{row.steps}"),
                         ("final loss", significant(row.final_loss)),
                         (row.best_val_name or "best validation", significant(row.best_val)),
                         ("tags", ", ".join(row.tags)),
                         ("archived", "yes" if row.archived else "")):
        if value:
            print(f"  {label}: {value}")
    if row.active:  # asked where its tasks run, over SSH too: alive, or unknown and why
        print(f"  its processes: {_liveness(row)}")
    if row.note:
        print("  note:")
        for line in row.note.splitlines():
            print(f"    {line}")
    if row.kind == SWEEP:
        _show_sweep(Path(row.folder))
    else:
        _show_run(Path(row.folder))
    return 0


def _liveness(row: RunRow) -> str:
    from dtgui.core.runs.records import RunHistory
    from dtgui.launch.start.run_check import settle

    record = RunHistory.read(Path(row.folder))
    if record is None:
        return "unknown: its record cannot be read"
    check = settle(record)
    return check.text if record.is_active else f"none left: recorded as {record.state}"
def _show_run(folder: Path) -> None:
    """Its settings (as MLflow's params) and each stretch of its training (its first start,
    then each resume)."""
    from dtgui.core.plans.plan import PLAN_NAME, Plan, PlanError
    from dtgui.core.runs.records import RunHistory
    from dtgui.core.tracking import run_params

    try:
        plan = Plan.from_dict(json.loads((folder / PLAN_NAME).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, KeyError, PlanError) as exc:
        print(f"  settings: {folder / PLAN_NAME} cannot be read ({exc})")
    else:
        _print_settings(run_params(plan))
    record = RunHistory.read(folder)
    segments = record.segments if record is not None else []
    if segments:
        print("  training:")
    for number, seg in enumerate(segments, 1):
        start = f"from step {seg.from_step}" if seg.from_step else "from the start"
        reached = f" to step {seg.steps}" if seg.steps else ""
        ended = f", ended {_when(seg.ended)}" if seg.ended else ""
        machines = ", ".join(seg.machines) or "local"
        print(f"    {number}. {_when(seg.started)} on {machines}, {start}{reached}{ended}: "
              f"{seg.state}")


def _show_sweep(folder: Path) -> None:
    """What it searches and its base run's settings, then its trials."""
    from dtgui.core.plans.plan import Plan, PlanError
    from dtgui.core.sweeps.sweep import SWEEP_FILE
    from dtgui.core.tracking import run_params
    from dtgui.launch.run_admin import sweep_rows

    try:
        data = json.loads((folder / SWEEP_FILE).read_text(encoding="utf-8"))
        spec, plan = dict(data["spec"]), Plan.from_dict(data["plan"])
    except (OSError, ValueError, TypeError, KeyError, PlanError) as exc:
        print(f"  settings: {folder / SWEEP_FILE} cannot be read ({exc})")
        return
    print("  search:")
    for key in ("search", "trials", "parallel", "objective", "direction", "pruner", "seed"):
        if spec.get(key) not in (None, ""):
            print(f"    {key}: {spec[key]}")
    for param in spec.get("params") or ():
        print(f"    varies {param}")
    _print_settings(run_params(plan))
    trials = sweep_rows(folder)[1:]
    if trials:
        print("  trials:")
    for trial in trials:
        value = significant(trial.best_val)
        result = f", {trial.best_val_name} {value}" if value else ""
        print(f"    {trial.name}: {trial.state}{result}")


def _print_settings(settings: dict[str, str]) -> None:
    print("  settings:")
    for key, value in sorted(settings.items()):
        print(f"    {key}: {value}")


def _delete(row: RunRow, args: argparse.Namespace) -> int:
    from dtgui.launch.run_admin import RunAdminError, delete_run

    if not args.yes:
        where = " and its copies on the machines" if args.remote else ""
        answer = input(f"Delete {row.name} ({row.folder}){where}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return 1
    try:
        done = delete_run(row.folder, remote=args.remote)
    except RunAdminError as exc:
        print(f"dtgui runs delete: {exc}", file=sys.stderr)
        return 2
    print(done.text(), file=sys.stdout if done.local else sys.stderr)
    return 0 if done.local else 1


def _export_to(row: RunRow, destination: Path) -> int:
    from dtgui.core.bundles.bundle import BundleError
    from dtgui.core.plans.plan import PlanError
    from dtgui.launch.run_admin import RunAdminError, export_run

    try:
        path, how = export_run(row.folder, destination)
    except (RunAdminError, BundleError, PlanError, OSError) as exc:
        print(f"dtgui runs export: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}; reproduce the run without dtgui: {how}")
    return 0


def _tag(row: RunRow, tag: str, remove: bool) -> int:
    from dtgui.core.runs.run_index import Notes
    from dtgui.launch.run_admin import set_notes

    if remove:
        notes = set_notes(row.folder, tags=[t for t in Notes.read(row.folder).tags
                                            if t != tag.strip()])
    else:
        notes = set_notes(row.folder, add_tags=[tag])
    print(f"{row.name}: tags {', '.join(notes.tags) or '(none)'}")
    return 0
