"""Running commands on a machine: argv quoted with shlex, scripts on stdin.

`CommandRunner` runs one argv the same way on this machine (`LocalRunner`, a subprocess) and
on a connected one (`SshRunner`, an SSH exec), so a check is written once for both.

Every call blocks (run it on a background thread) and ends within its timeout: a command
still running then is abandoned (`CommandTimeout`), a lost connection is a `ConnectError`.
An interpreter or program that is not there gives exit code 127, as a shell says it.
"""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

import paramiko

from dtgui.remote.hostkeys import ConnectError


class CommandTimeout(ConnectError):
    """A command did not finish in time (it was abandoned: killed here, its channel closed
    over SSH)."""


NOT_FOUND = 127  # the exit code of a command that is not there
REMOVE_TIMEOUT = 30.0


class CommandFailed(RuntimeError):
    """A command ran and failed: the message says why."""


class CommandRunner(Protocol):
    """Runs argv on one machine: (exit code, stdout, stderr). `env` is added to the command's
    environment. Raises CommandTimeout, ConnectError (over SSH)."""

    def run(self, argv: Sequence[str], timeout: float, *, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> tuple[int, bytes, bytes]: ...


class LocalRunner:
    """Commands on this machine, as subprocesses (in their own session, so that
    `cancel_local_commands` can end them when the application quits)."""

    def run(self, argv: Sequence[str], timeout: float, *, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> tuple[int, bytes, bytes]:
        args = [str(a) for a in argv]
        try:
            proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True,
                                    env={**os.environ, **(env or {})})
        except FileNotFoundError:
            return NOT_FOUND, b"", f"{args[0]}: not found".encode()
        except PermissionError as exc:
            return 126, b"", f"{args[0]}: {exc.strerror}".encode()
        with _local_lock:
            _local.add(proc)
        try:
            out, err = proc.communicate(stdin or b"", timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise CommandTimeout(f"{args[0]} did not finish within {timeout:g} s.") from None
        finally:
            with _local_lock:
                _local.discard(proc)
        return proc.returncode, out, err


_local: set[subprocess.Popen[bytes]] = set()
_local_lock = threading.Lock()


def cancel_local_commands() -> None:
    """Kill every LocalRunner command still running (the application is quitting)."""
    with _local_lock:
        procs = list(_local)
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


class SshRunner:
    """Commands on a connected machine, each argument quoted (see `run_bytes`)."""

    def __init__(self, client: paramiko.SSHClient) -> None:
        self.client = client

    def run(self, argv: Sequence[str], timeout: float, *, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> tuple[int, bytes, bytes]:
        prefix = ["env", *(f"{k}={v}" for k, v in env.items())] if env else []
        return run_bytes(self.client, [*prefix, *argv], timeout, stdin=stdin)


def run(client: paramiko.SSHClient, argv: Sequence[str], timeout: float = 60.0, *,
        stdin: bytes | None = None) -> tuple[int, str, str]:
    """Run argv remotely (each argument quoted with shlex; nothing is ever interpolated).

    Returns (exit code, stdout, stderr); the code is -1 when the command died of a signal.
    Raises CommandTimeout when it runs longer than `timeout` seconds.
    """
    code, out, err = run_bytes(client, argv, timeout, stdin=stdin)
    return code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def run_bytes(client: paramiko.SSHClient, argv: Sequence[str], timeout: float = 30.0, *,
              stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
    """Run argv remotely; (exit code, stdout, stderr) as bytes. Raises CommandTimeout,
    ConnectError when the connection is gone."""
    if isinstance(argv, (str, bytes)):
        raise TypeError("argv must be a list of arguments, not one string")
    args = [str(a) for a in argv]
    if not args or any("\x00" in a for a in args):
        raise ValueError("argv must be non-empty and hold no NUL characters")
    transport = client.get_transport()
    if transport is None or not transport.is_active():
        raise ConnectError("The connection is closed.")
    deadline = time.monotonic() + timeout
    try:
        chan = transport.open_session(timeout=timeout)
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise ConnectError(f"The connection failed: {exc or type(exc).__name__}") from None
    try:
        chan.settimeout(timeout)
        chan.exec_command(shlex.join(args))
        try:
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
        except OSError:
            # a command that ends before reading its input (not found, say) closes the
            # channel under the writer: its exit code and output say what happened
            if not transport.is_active():
                raise
        out, err = bytearray(), bytearray()
        while True:
            got = False
            while chan.recv_ready():
                out += chan.recv(1 << 20)
                got = True
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(1 << 20)
                got = True
            if chan.exit_status_ready() and chan.eof_received and not got \
                    and not chan.recv_ready() and not chan.recv_stderr_ready():
                break
            if time.monotonic() > deadline:
                raise CommandTimeout(f"{args[0]} did not finish within {timeout:g} s.")
            if not transport.is_active():
                raise ConnectError("The connection was lost.")
            if not got:
                select.select([chan], [], [], 0.05)
        return chan.recv_exit_status(), bytes(out), bytes(err)
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise ConnectError(f"The connection failed: {exc or type(exc).__name__}") from None
    finally:
        with contextlib.suppress(Exception):
            chan.close()


def run_script_bytes(client: paramiko.SSHClient, script: str, args: Sequence[str] = (),
                     timeout: float = 30.0) -> tuple[int, bytes, bytes]:
    """Run a POSIX sh script remotely: the command line is only `sh -s -- ARGS...` (quoted),
    the script goes on stdin, so any login shell (bash, zsh, fish, tcsh) starts it alike.
    The script's own commands get /dev/null as stdin."""
    body = "{\n" + script.strip("\n") + "\n} </dev/null\n"
    return run_bytes(client, ["sh", "-s", "--", *args], timeout, stdin=body.encode("utf-8"))


def run_script(client: paramiko.SSHClient, script: str, args: Sequence[str] = (),
               timeout: float = 60.0) -> tuple[int, str, str]:
    """`run_script_bytes`, its output decoded."""
    code, out, err = run_script_bytes(client, script, args, timeout)
    return code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def remove_run_dir(runner: CommandRunner, path: str) -> None:
    """Remove a run's directory on a machine: the copy of a run being deleted
    (`dtgui.launch.host.Host.remove_tree`), or one a launch that did not start made.
    CommandFailed when it is no run's directory (absolute, two levels deep at least) or
    cannot be removed."""
    if not path.startswith("/") or path.rstrip("/").count("/") < 2:
        raise CommandFailed(f"not a run's directory: {path!r}")
    code, _, err = runner.run(["rm", "-rf", "--", path], REMOVE_TIMEOUT)
    if code != 0:
        raise CommandFailed(f"cannot remove {path}: {err.decode('utf-8', 'replace').strip()}")
