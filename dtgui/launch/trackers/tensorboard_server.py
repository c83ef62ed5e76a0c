"""Open runs in TensorBoard: a real TensorBoard server on a free port of this machine.

`open_in_tensorboard(folders)` starts TensorBoard (`tensorboard.main`, in a session of its
own, without TensorFlow: TB_MAIN) on the runs' folders, waits until
it answers, and opens the browser, or says the URL where there is none. One server at a time:
opening others stops the previous one, and dtgui's exit stops the last. Blocks (the start
takes seconds): call it off the UI thread.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import webbrowser
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dtgui.core.plans.placement import port_in_use
from dtgui.worker.layout import OUTPUT_DIR
from dtgui.worker.machine_probe import choose_free_ports, port_is_free

START_SECONDS = 120.0
# TensorBoard without TensorFlow (its own stub of TensorFlow's file reading): it starts in
# seconds instead of importing TensorFlow for tens of seconds, and dtgui's files (scalars,
# HParams) and a script's summaries read the same. The marker module is the switch
# tensorboard.compat looks for.
TB_MAIN = ("import sys, types; "
           "sys.modules['tensorboard.compat.notf'] = types.ModuleType('tensorboard.compat.notf'); "
           "from tensorboard.main import run_main; run_main()")
TB_DIR = f"{OUTPUT_DIR}/tensorboard"


class TensorBoardError(RuntimeError):
    """TensorBoard did not start; the message says why (its last output lines)."""


@dataclass
class TensorBoard:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)


_current: TensorBoard | None = None
_lock = threading.Lock()


def logdir_spec(folders: Sequence[Path]) -> str:
    """TensorBoard's `--logdir_spec`: each run's TensorBoard folder by the run's folder name
    (a sweep's folder as it is: its trials are under it)."""
    parts = []
    for folder in folders:
        tb = folder / TB_DIR
        parts.append(f"{folder.name}:{tb if tb.is_dir() else folder}")
    return ",".join(parts)


def start_tensorboard(folders: Sequence[Path], port: int = 0,
                      log: Path | None = None) -> TensorBoard:
    """A TensorBoard server on the folders (run bundles, a sweep or the runs folder), on
    `port` (0: a free one); the previous one is stopped. Returns once it answers."""
    global _current
    if port and not port_is_free(port):
        raise TensorBoardError(port_in_use(port, "tensorboard"))
    port = port or choose_free_ports(1)[0]
    log = log or Path(os.environ.get("TMPDIR", "/tmp")) / f"dtgui-tensorboard-{port}.log"
    args = [sys.executable, "-c", TB_MAIN, "--port", str(port),
            "--host", "127.0.0.1", "--reload_interval", "5"]
    if len(folders) == 1:
        args += ["--logdir", str(folders[0])]
    else:
        args += ["--logdir_spec", logdir_spec(folders)]
    with _lock:
        if _current is not None:
            _current.stop()
            _current = None
        with open(log, "wb") as out:
            process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        board = TensorBoard(process, f"http://127.0.0.1:{port}/", log)
        _current = board
    _wait_answering(board, port)
    return board


def _wait_answering(board: TensorBoard, port: int) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if board.process.poll() is not None:
            tail = board.log.read_text(errors="replace").strip().splitlines()[-3:]
            raise TensorBoardError("TensorBoard ended before it answered: " + " | ".join(tail))
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.3)
    board.stop()
    raise TensorBoardError(f"TensorBoard did not answer on port {port} within "
                           f"{START_SECONDS:g} s (its output: {board.log})")


def open_in_tensorboard(folders: Sequence[Path]) -> tuple[str, bool]:
    """Start TensorBoard on the folders and open the browser: (its URL, whether a browser
    was opened; when not, show the URL)."""
    board = start_tensorboard(folders)
    opened = False
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or sys.platform == "darwin":
        with contextlib.suppress(webbrowser.Error):
            opened = webbrowser.open(board.url)
    return board.url, opened


def stop_tensorboard() -> None:
    """Stop the server dtgui started (at exit)."""
    global _current
    with _lock:
        if _current is not None:
            _current.stop()
            _current = None


atexit.register(stop_tensorboard)
