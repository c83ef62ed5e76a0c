"""The command line's MLflow: `--mlflow URI` (dtgui, dtgui run, dtgui sweep) and
`dtgui runs export-mlflow RUN... [--tracking-uri URI]` (docs/mlflow.md)."""

from __future__ import annotations

import argparse
import sys

from dtgui.core.tracking import INSTALL_HINT, mlflow_installed, tracking_uri, use_from_command_line


def add_mlflow_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mlflow", metavar="URI", default=argparse.SUPPRESS,
        help="send runs to MLflow at URI (a tracking server, or sqlite:///FILE); 'default': "
        "dtgui's own store (sqlite:///<data folder>/mlflow.db); 'off': not at all. Default: "
        "the app's preference, else MLFLOW_TRACKING_URI, else off")


def apply_mlflow_option(args: argparse.Namespace) -> None:
    value = getattr(args, "mlflow", None)
    if value is not None:
        use_from_command_line(value)


def add_export_mlflow(runs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`export-mlflow` under `dtgui runs`."""
    export = runs.add_parser(
        "export-mlflow", help="send past runs to MLflow (again: a run already there is "
        "updated, never duplicated)")
    export.add_argument("runs", nargs="+", metavar="RUN",
                        help="a run's id or name (as `dtgui runs list` shows), or its folder")
    export.add_argument("--tracking-uri", default="",
                        help="where to (default: as --mlflow, else dtgui's own store)")


def cmd_export_mlflow(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dtgui.core.runs.records import RunHistory, RunRecord
    from dtgui.core.tracking import embedded_uri
    from dtgui.launch.trackers.mlflow_runs import send_past_run

    if not mlflow_installed():
        print(f"dtgui runs export-mlflow: {INSTALL_HINT}", file=sys.stderr)
        return 2
    uri = args.tracking_uri or tracking_uri() or embedded_uri()
    records = RunHistory().records()
    failed = 0
    for name in args.runs:
        record = next((r for r in records if name in (r.run_id, r.run_name)), None)
        if record is None and Path(name, "run.json").is_file():
            record = RunRecord.load(Path(name))
        if record is None:
            print(f"dtgui runs export-mlflow: no run {name!r} in {RunHistory().root}",
                  file=sys.stderr)
            failed += 1
            continue
        try:
            run_id = send_past_run(record, uri)
        except Exception as exc:  # noqa: BLE001 - MLflow's errors, said for this run
            print(f"dtgui runs export-mlflow: {record.run_name}: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(f"{record.run_name}: MLflow run {run_id} at {uri}")
    return 1 if failed else 0

