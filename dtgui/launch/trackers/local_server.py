"""The web servers dtgui starts on this machine to show results (TensorBoard, MLflow's UI).

One way for both: the server's program in a session of its own, on a free port of 127.0.0.1
(nothing outside this machine reaches it), its output in a log file; `start_server` returns
once it answers HTTP (or says why it did not, with the log's last lines). One server a
`key` at a time: asked again with the same command, the one running is reused (no second
start of seconds); with another, the previous one is stopped. `stop_oldest` keeps a few of
a kind (keys of one prefix: a page a user opened keeps working while another is opened).
dtgui's exit stops them all.
Blocks (a start takes seconds): call it off the UI thread.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import webbrowser
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dtgui.core.plans.placement import port_in_use
from dtgui.core.runs.records import RunRecord
from dtgui.core.time_limits import start_limit
from dtgui.worker.machine_probe import choose_free_ports, port_is_free

START_SECONDS = 120.0  # MLflow's server imports for seconds, more on a loaded machine


def say_nothing(doing: str) -> None:
    """Where a start says what it is doing when nobody shows it."""


@dataclass
class ServicePage:
    """A page to open and what it will not show: `note` says why and how to fix it;
    `unsent` are the ended runs a button can send there."""

    url: str
    note: str = ""
    unsent: list[RunRecord] = field(default_factory=list)


class ServerError(RuntimeError):
    """A server did not start; the message says why (its last output lines), `command` what
    to run first when something is missing."""

    def __init__(self, message: str, command: str = "") -> None:
        super().__init__(message)
        self.command = command


@dataclass
class LocalServer:
    key: str
    command: tuple[str, ...]  # without the port: what makes it the same server again
    process: subprocess.Popen[bytes]
    url: str  # http://127.0.0.1:PORT/
    log: Path

    @property
    def running(self) -> bool:
        return self.process.poll() is None

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


_servers: dict[str, LocalServer] = {}
_lock = threading.Lock()


def start_server(key: str, command: Sequence[str], port_args: Callable[[int], list[str]], *,
                 name: str, port: int = 0, ready_path: str = "/",
                 cwd: Path | None = None, env: dict[str, str] | None = None) -> LocalServer:
    """The server `key` running `command` + `port_args(port)` on `port` (0: a free one),
    answering `ready_path`; `name` is how messages call it; `env`: added to dtgui's own."""
    wanted = tuple(command)
    with _lock:
        current = _servers.get(key)
    if current is not None and current.command == wanted and current.running \
            and (not port or current.url.endswith(f":{port}/")):
        with _lock:  # the newest used: the last `stop_oldest` stops
            if _servers.get(key) is current:
                _servers[key] = _servers.pop(key)
        _wait_answering(current, name, ready_path)  # it may still be starting
        return current
    if port and not port_is_free(port):
        raise ServerError(port_in_use(port, name))
    port = port or choose_free_ports(1)[0]
    slug = "".join(c if c.isalnum() else "-" for c in key)[-60:]
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"dtgui-{slug}-{port}.log"
    with _lock:
        current = _servers.pop(key, None)
        if current is not None:
            current.stop()
        with open(log, "wb") as out:
            process = subprocess.Popen([*wanted, *port_args(port)], stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True, cwd=cwd,
                                       env={**os.environ, **env} if env else None)
        server = _servers[key] = LocalServer(key, wanted, process,
                                             f"http://127.0.0.1:{port}/", log)
    _wait_answering(server, name, ready_path)
    return server


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(200 <= reply.status < 400)
    except urllib.error.HTTPError:
        return False
    except (OSError, ValueError):
        return False


def _wait_answering(server: LocalServer, name: str, ready_path: str) -> None:
    limit = start_limit(START_SECONDS)
    deadline = time.monotonic() + limit
    url = server.url + ready_path.lstrip("/")
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            tail = server.log.read_text(errors="replace").strip().splitlines()[-3:]
            raise ServerError(f"{name} ended before it answered: " + " | ".join(tail))
        if _answers(url):
            return
        time.sleep(0.3)
    stop_server(server.key)
    raise ServerError(f"{name} did not answer on {server.url} within {limit:g} s "
                      f"(its output: {server.log})")


def stop_server(key: str) -> None:
    with _lock:
        server = _servers.pop(key, None)
    if server is not None:
        server.stop()


def stop_oldest(prefix: str, keep: int) -> None:
    """Of the servers whose key starts with `prefix`, stop the least recently asked for
    beyond `keep`."""
    with _lock:
        mine = [k for k in _servers if k.startswith(prefix)]
        gone = [_servers.pop(k) for k in mine[:max(0, len(mine) - keep)]]
    for server in gone:
        server.stop()


def stop_servers(prefix: str = "") -> None:
    """Stop every server dtgui started (at exit), or those whose key starts with `prefix`."""
    with _lock:
        servers = [s for k, s in _servers.items() if k.startswith(prefix)]
        for server in servers:
            del _servers[server.key]
    for server in servers:
        server.stop()


def try_browser(url: str) -> bool:
    """Ask the desktop's browser to open `url`: whether it was asked. That is no proof a page
    opened (xdg-open says yes with no browser to open): the URL is always shown beside."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
            or sys.platform == "darwin"):
        return False
    with contextlib.suppress(webbrowser.Error):
        return bool(webbrowser.open(url))
    return False


atexit.register(stop_servers)
