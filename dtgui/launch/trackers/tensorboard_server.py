"""Open runs in TensorBoard: a real TensorBoard server on a free port of this machine
(`dtgui.launch.trackers.local_server`, as MLflow's UI).

`start_tensorboard(folders)` starts TensorBoard (`tensorboard.main`, without TensorFlow:
TB_MAIN) on the runs' folders; with none, on every run dtgui lists: the runs folder, each
known sweep's folder (its trials: their HParams sessions) and the runs launched elsewhere.
Asked again for the same folders, the running server is reused; for others another is
started beside it (a page already open keeps working), up to KEEP, the least recently asked
for stopped first. One folder (a run, a sweep, the runs folder) is TensorBoard's `--logdir`:
the profile plugin (XProf) reads only that, it finds nothing under `--logdir_spec` and
follows no symbolic link. Several are `--logdir_spec`, each run named by its folder's name
(their scalars and HParams side by side; their profiles are read one run at a time).
Blocks (the start takes seconds): call it off the UI thread.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from dtgui.core.runs.records import known_sweeps, listed_outside
from dtgui.core.settings import runs_dir
from dtgui.launch.trackers.local_server import (
    LocalServer,
    ServerError,
    say_nothing,
    start_server,
    stop_oldest,
    stop_servers,
)
from dtgui.worker.layout import OUTPUT_DIR, TENSORBOARD_NAME

# TensorBoard without TensorFlow (its own stub of TensorFlow's file reading): it starts in
# seconds instead of importing TensorFlow for tens of seconds, and dtgui's files (scalars,
# HParams) and a script's summaries read the same. The marker module is the switch
# tensorboard.compat looks for. TensorFlow made unimportable: the profile plugin would import
# it for its remote capture only (dtgui captures in the tasks), and reads traces without it.
TB_MAIN = ("import sys, types; "
           "sys.modules['tensorboard.compat.notf'] = types.ModuleType('tensorboard.compat.notf'); "
           "sys.modules['tensorflow'] = None; "
           "from tensorboard.main import run_main; run_main()")
TB_DIR = f"{OUTPUT_DIR}/{TENSORBOARD_NAME}"
KEY = "tensorboard:"  # and what it serves
KEEP = 3  # TensorBoards kept running at once (each a process of a few hundred MB)


def every_run_folder() -> list[Path]:
    """What the toolbar's TensorBoard shows: the runs folder, the sweeps, the runs elsewhere
    (reads the registers: off the UI thread)."""
    found = [f.resolve() for f in (runs_dir(), *known_sweeps(), *listed_outside()) if f.is_dir()]
    # each once: a sweep made inside the runs folder is read with it
    return [f for i, f in enumerate(found)
            if not any(f == g or f.is_relative_to(g) for g in found[:i])]


def logdir_spec(folders: Sequence[Path]) -> str:
    """TensorBoard's `--logdir_spec`: each run's TensorBoard folder by the run's folder name
    (a sweep's folder as it is: its trials are under it), each name once."""
    parts, names = [], set()
    for folder in folders:
        tb = folder / TB_DIR
        name, n = folder.name, 1
        while name in names:
            n += 1
            name = f"{folder.name}-{n}"
        names.add(name)
        parts.append(f"{name}:{tb if tb.is_dir() else folder}")
    return ",".join(parts)


def logdir_args(folders: Sequence[Path]) -> list[str]:
    """TensorBoard's arguments naming what it reads: one folder as `--logdir` (a run's
    TensorBoard folder; a sweep or the runs folder as it is), several as `logdir_spec`."""
    if len(folders) == 1:
        tb = folders[0] / TB_DIR
        return ["--logdir", str(tb if tb.is_dir() else folders[0])]
    return ["--logdir_spec", logdir_spec(folders)]


def start_tensorboard(folders: Sequence[Path] | None = None, port: int = 0,
                      say: Callable[[str], None] = say_nothing) -> LocalServer:
    """A TensorBoard server on the folders (run bundles, sweeps, the runs folder; None:
    `every_run_folder`), on `port` (0: a free one). Returns once it answers."""
    chosen = list(folders) if folders is not None else every_run_folder()
    if not chosen:
        raise ServerError("There is no run to show in TensorBoard yet.")
    reads = logdir_args(chosen)
    command = [sys.executable, "-c", TB_MAIN, "--host", "127.0.0.1", "--reload_interval", "5",
               *reads]
    say(f"Starting TensorBoard on {len(chosen)} folder(s)")
    server = start_server(KEY + reads[-1], command, lambda p: ["--port", str(p)],
                          name="TensorBoard", port=port)
    stop_oldest(KEY, KEEP)
    return server


def stop_tensorboard() -> None:
    """Stop every TensorBoard dtgui started."""
    stop_servers(KEY)
