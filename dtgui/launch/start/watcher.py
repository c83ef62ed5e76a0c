"""A headless run watcher: the run policy keeps being applied while dtgui is closed.

When the person closes dtgui with *Keep training*, the GUI detaches its `RunController` and
calls `start_watcher(record, secrets, max_restarts)`. That starts

    python -m dtgui.launch.start.watcher <run dir> --max-restarts N

in a session of its own (it outlives the GUI and its terminal). The watcher reads the secrets
given during the GUI session (machine name -> {"password" / "passphrase": value}) as JSON from
its stdin - never from a file, its command line or its environment - reattaches to the run
(`dtgui.launch.start.pipeline.reattach`, connecting through `dtgui.remote.connector.Connector`
with those secrets) with the same policy and follows it until the run ends: a
task that dies, hangs or whose machine stays unreachable fails the run and every other task is
stopped (or every task is restarted, with `max_restarts`), exactly as in the GUI.

* The watcher's pid is kept in `<run dir>/watcher.pid` and its log in `<run dir>/watcher.log`
  (`dtgui.launch.runs.detached`, which starts and stops the sweeps' processes the same way).
* SIGTERM makes it detach (the tasks keep running) and exit 0: `stop_watcher(record)` is how
  the GUI takes the run back before it reattaches. A policy action under way (stopping the
  tasks, a restart) is finished first, so the record always names the running tasks.
* When reattaching fails (a machine does not answer: a laptop waking up, a network not up
  yet), the reason is logged and it tries again every 30 s for up to 6 hours. It never stops
  a task by itself: only the policy of an attached controller does.

No Qt and no TensorFlow here (the controller is TensorFlow-free).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from dtgui.core.runs.records import RECORD_NAME, RunRecord
from dtgui.core.runs.run_state import RunState
from dtgui.launch.runs.detached import Detached
from dtgui.remote.connector import GivenSecrets, Secrets

MODULE = "dtgui.launch.start.watcher"
PID_NAME = "watcher.pid"
LOG_NAME = "watcher.log"
WATCHER = Detached(MODULE, PID_NAME, LOG_NAME)
RETRY_SECONDS = 30.0  # reattaching failed: try again after this long ...
RETRY_FOR_SECONDS = 6 * 3600.0  # ... for up to this long
DETACH_SECONDS = 300.0  # SIGTERM: let the policy finish what it is doing (a restart) first

log = logging.getLogger("dtgui.watcher")


# -- the GUI's side ---------------------------------------------------------------------------
def run_dir_of(record: RunRecord | Path | str) -> Path:
    """The run's directory (the local bundle, where run.json is) from a record or a path."""
    path = Path(record.bundle) if isinstance(record, RunRecord) else Path(record)
    if path.name == RECORD_NAME:
        path = path.parent
    return Path(os.path.realpath(path))


def start_watcher(record: RunRecord, secrets: Secrets | GivenSecrets | None,
                  max_restarts: int) -> int:
    """Start the watcher of a run the GUI has just detached from (`controller.detach()`);
    returns its pid (also written to `<run dir>/watcher.pid`). A watcher already running for
    this run is stopped first. Returns quickly (unless an old watcher has to be stopped)."""
    run_dir = run_dir_of(record)
    if not (run_dir / RECORD_NAME).is_file():
        raise FileNotFoundError(f"{run_dir} has no run record ({RECORD_NAME})")
    stop_watcher(run_dir)
    payload = (secrets if isinstance(secrets, Secrets) else Secrets(secrets)).as_dict()
    # The secrets go on stdin, after the pid file: the watcher reads stdin to its end first.
    return WATCHER.start(run_dir, ["--max-restarts", str(int(max_restarts))],
                         stdin=json.dumps(payload).encode("utf-8"))


def is_watcher(pid: int, run_dir: Path) -> bool:
    """Whether process `pid` is the watcher of the run in `run_dir` (pids are reused: the
    command line must say so). A zombie has no command line: it is not a watcher any more."""
    return WATCHER.is_one(pid, run_dir)


def watcher_pid(record: RunRecord | Path | str) -> int | None:
    """The pid of the watcher following this run, or None when none is running."""
    return WATCHER.pid(run_dir_of(record))


def stop_watcher(record: RunRecord | Path | str, timeout: float = 10.0) -> bool:
    """Take the run back from its watcher: SIGTERM it, wait up to `timeout` s for it to
    exit, forget it. Blocks: call it off the UI thread, before `reattach`.

    Returns True when no watcher of this run is left (it exited, or none was running: then
    reattaching is safe), False when it is still running after `timeout` (it is finishing a
    policy action, e.g. a restart: try again). Only a process whose command line is this
    run's watcher is ever signalled."""
    return WATCHER.stop(run_dir_of(record), timeout)


# -- the watcher process ----------------------------------------------------------------------
def read_secrets(stream: Any) -> Secrets:
    """The JSON object on stdin (to its end); anything else counts as no secrets."""
    try:
        data = json.loads(stream.read().decode("utf-8") or "{}")
    except (OSError, ValueError):
        log.warning("the secrets on stdin could not be read; using the keyring only")
        return Secrets()
    if not isinstance(data, dict):
        return Secrets()
    return Secrets({str(m): {str(k): str(v) for k, v in kinds.items()}
                    for m, kinds in data.items() if isinstance(kinds, dict)})


def watch(run_dir: Path, secrets: Secrets | GivenSecrets, max_restarts: int,
          stop: threading.Event, *,
          retry_seconds: float = RETRY_SECONDS, retry_for: float = RETRY_FOR_SECONDS) -> int:
    """Reattach to the run (retrying while it cannot be) and follow it until it ends or
    `stop` is set (then detach). Returns the exit status of the watcher."""
    from dtgui.core.machines.registry import MachineRegistry
    from dtgui.launch.controller import LaunchError
    from dtgui.launch.runs.policy import RunPolicy
    from dtgui.launch.start.pipeline import reattach
    from dtgui.launch.start.run_check import settle
    from dtgui.remote.connector import Connector

    policy = RunPolicy(max_restarts=max_restarts)
    give_up = time.monotonic() + retry_for
    while True:
        try:
            record = RunRecord.load(run_dir)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.error("the run record in %s cannot be read (%s); nothing to watch", run_dir, exc)
            return 1
        registry = MachineRegistry()
        if record.is_active:
            settle(record, connector=Connector(secrets, registry), registry=registry)
        if not record.is_active:
            log.info("run %s has already ended (%s); nothing to watch", record.run_id,
                     record.state)
            return 0
        if stop.is_set():
            return 0
        try:
            controller = reattach(record, connect=Connector(secrets, registry),
                                  registry=registry, policy=policy)
            break
        except LaunchError as exc:
            if time.monotonic() + retry_seconds > give_up:
                log.error("%s; gave up after %.0f s: nothing was stopped, reopen dtgui to "
                          "take the run back", exc, retry_for)
                return 1
            log.warning("%s; trying again in %g s (nothing is stopped meanwhile)", exc,
                        retry_seconds)
        except Exception:  # a damaged bundle: no retry helps
            log.exception("cannot reattach to run %s", record.run_id)
            return 1
        if stop.wait(retry_seconds):
            log.info("SIGTERM: the run is left to dtgui")
            return 0
    tasks = ", ".join(f"{t.task}@{t.machine}" for t in record.tasks)
    log.info("watching run %s (%s), max restarts %d", record.run_id, tasks, max_restarts)
    restarts = controller.restarts
    while not controller.wait(0.5):
        if controller.restarts != restarts:
            restarts = controller.restarts
            log.warning("%s", controller.message)
        if stop.is_set():
            controller.detach(DETACH_SECONDS)
            if controller.finished and controller.state is not RunState.DETACHED:
                break  # a policy action was under way when asked: it ended the run
            log.info("SIGTERM: detached, the tasks keep running (dtgui takes the run back)")
            return 0
    log.info("the run ended: %s (%s)", controller.state, controller.message)
    return 0


def main(argv: list[str] | None = None) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}",
                                     description="Apply a run's failure policy headless.")
    parser.add_argument("run", help="the run directory (or its run.json)")
    parser.add_argument("--max-restarts", type=int, default=0)
    parser.add_argument("--retry-seconds", type=float, default=RETRY_SECONDS)
    parser.add_argument("--retry-for", type=float, default=RETRY_FOR_SECONDS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s watcher[%(process)d] %(levelname)s %(message)s")
    logging.getLogger("paramiko").setLevel(logging.WARNING)
    secrets = read_secrets(sys.stdin.buffer)
    with contextlib.suppress(OSError):
        sys.stdin.close()
    run_dir = run_dir_of(args.run)
    log.info("started for %s (secrets given for %d machine(s))", run_dir, len(secrets))
    try:
        with WATCHER.claim(run_dir):
            return watch(run_dir, secrets, args.max_restarts, stop,
                         retry_seconds=args.retry_seconds, retry_for=args.retry_for)
    except Exception:
        log.exception("the watcher failed")
        return 1
    finally:
        logging.shutdown()


if __name__ == "__main__":
    sys.exit(main())
