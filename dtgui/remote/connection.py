"""Connecting to machines over SSH, and installing a public key (commands: `commands.py`).

Every call blocks: run it on a background thread. Nothing asks questions on a terminal; what
a person must decide or supply surfaces as an exception a dialog can act on:

* `UnknownHostKeyError`: show `.fingerprint`, and on "accept" call
  `hostkeys.trust_host_key(exc.host, exc.port, exc.key)`, then connect again.
* `SecretRequired`: ask for `.kind` ("password" / "passphrase") of `.machine`, then connect
  again with it (and store it with `secrets.set_secret` if the person wants it remembered).

All other failures are `ConnectError` subclasses whose text is one plain sentence, raised
within the connect timeout. Host keys are checked against the app's known_hosts and
~/.ssh/known_hosts with a reject policy: nothing is ever added automatically.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from dataclasses import replace
from typing import Any, NoReturn

import paramiko

from dtgui.core.machines.registry import (
    AUTH_LABELS,
    Machine,
    MachineError,
    MachineRegistry,
    resolve_jump,
)
from dtgui.remote import secrets
from dtgui.remote.commands import CommandTimeout, run, run_script
from dtgui.remote.hostkeys import (
    ChangedHostKeyError,
    ConnectError,
    UnknownHostKeyError,
    fingerprint_sha256,
    load_into,
)
from dtgui.remote.secrets import AgentUnavailable, KeyFileError, SecretRequired, WrongPassphrase

__all__ = [
    "AgentUnavailable", "AuthMethodRefused", "ChangedHostKeyError", "CommandTimeout",
    "ConnectError", "ConnectTimeout", "ConnectionRefused", "HostUnreachable",
    "InvalidMachine", "KeyFileError", "KeyRefused", "NameNotResolved", "SecretRequired",
    "SshProtocolError", "UnknownHostKeyError", "WrongPassphrase", "WrongPassword", "connect",
    "install_public_key", "run", "run_script",
]

log = logging.getLogger(__name__)
# paramiko logs transport errors (e.g. a connection we close at the deadline) with tracebacks;
# they belong in the app's log when it has one, not on stderr through logging's last resort.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class InvalidMachine(ConnectError):
    """The machine's settings cannot be used (see `Machine.problems`)."""


class WrongPassword(ConnectError): ...
class KeyRefused(ConnectError): ...
class AuthMethodRefused(ConnectError): ...
class HostUnreachable(ConnectError): ...
class ConnectionRefused(HostUnreachable): ...
class NameNotResolved(ConnectError): ...
class ConnectTimeout(ConnectError): ...
class SshProtocolError(ConnectError): ...


class SSHClient(paramiko.SSHClient):
    """A paramiko client that also closes the jump host connection it runs through."""

    machine: Machine | None = None
    jump: paramiko.SSHClient | None = None

    def close(self) -> None:
        super().close()
        if self.jump is not None:
            self.jump.close()


class _RejectUnknown(paramiko.RejectPolicy):
    """Reject unknown keys, with the key and fingerprint a dialog needs to ask."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str,
                         key: paramiko.PKey) -> NoReturn:
        m = self.machine
        raise UnknownHostKeyError(
            m.host, m.port, key.get_name(), fingerprint_sha256(key), key, machine=m.name
        )


# -- network ----------------------------------------------------------------------------------
def _left(deadline: float) -> float:
    return deadline - time.monotonic()


def _resolve(machine: Machine, deadline: float, timeout: float) -> list[Any]:
    found: list[list[Any]] = []  # the addresses, once looked up
    failed: list[OSError] = []

    def work() -> None:
        try:
            found.append(socket.getaddrinfo(machine.host, machine.port, type=socket.SOCK_STREAM))
        except OSError as exc:
            failed.append(exc)

    worker = threading.Thread(target=work, daemon=True, name="dtgui-resolve")
    worker.start()
    worker.join(max(0.0, _left(deadline)))
    if worker.is_alive():
        raise ConnectTimeout(
            f"Looking up the name {machine.host!r} took longer than {timeout:g} s (no DNS answer).",
            machine=machine.name,
        )
    exc = failed[0] if failed else None
    if isinstance(exc, socket.gaierror) and exc.errno == socket.EAI_AGAIN:
        raise NameNotResolved(
            f"The name {machine.host!r} could not be looked up right now (no DNS server "
            "answered): check the network, or use the machine's IP address.", machine=machine.name,
        )
    if exc is not None:
        raise NameNotResolved(
            f"The name {machine.host!r} was not found: check the spelling, or use the machine's "
            "IP address.", machine=machine.name,
        )
    return found[0]


def _open_socket(machine: Machine, deadline: float, timeout: float) -> socket.socket:
    where = f"{machine.host} port {machine.port}"
    last: OSError | None = None
    for family, kind, proto, _, addr in _resolve(machine, deadline, timeout):
        if _left(deadline) <= 0:
            break
        sock = socket.socket(family, kind, proto)
        sock.settimeout(_left(deadline))
        try:
            sock.connect(addr)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no 40 ms stalls
            return sock
        except TimeoutError:
            sock.close()
            break
        except OSError as exc:
            sock.close()
            last = exc
    if last is None:
        raise ConnectTimeout(f"{where} did not answer within {timeout:g} s.", machine=machine.name)
    if last.errno == errno.ECONNREFUSED:
        raise ConnectionRefused(
            f"{where} refused the connection: no SSH server is listening there. Check the port "
            "and that sshd runs on the machine.", machine=machine.name,
        )
    if last.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN):
        raise HostUnreachable(
            f"{machine.host} cannot be reached (no route to it): is it switched on and on "
            "this network?", machine=machine.name,
        )
    raise HostUnreachable(f"{where} cannot be reached: {last.strerror}.", machine=machine.name)


def _tunnel(jump: paramiko.SSHClient, via: Machine, machine: Machine, deadline: float,
            timeout: float) -> paramiko.Channel:
    transport = jump.get_transport()
    assert transport is not None
    try:
        return transport.open_channel(
            "direct-tcpip", (machine.host, machine.port), ("127.0.0.1", 0),
            timeout=max(0.1, _left(deadline)),
        )
    except paramiko.ChannelException as exc:
        if exc.code == 1:
            raise ConnectError(
                f"The jump host {via.name} does not allow forwarding (AllowTcpForwarding).",
                machine=machine.name,
            ) from None
        raise HostUnreachable(
            f"The jump host {via.name} could not reach {machine.host} port {machine.port} "
            f"({exc.text}).", machine=machine.name,
        ) from None
    except paramiko.SSHException:
        raise ConnectTimeout(
            f"The jump host {via.name} did not open a way to {machine.host} within {timeout:g} s.",
            machine=machine.name,
        ) from None


# -- connect ----------------------------------------------------------------------------------
def connect(
    machine: Machine, *, password: str | None = None, passphrase: str | None = None,
    timeout: float = 10.0, registry: MachineRegistry | None = None,
    jump_password: str | None = None, jump_passphrase: str | None = None,
) -> SSHClient:
    """An authenticated client for `machine`, or a ConnectError within `timeout` seconds.

    Secrets not given are taken from the keyring. A jump host that is a registered machine
    uses its own sign-in method (and `jump_password` / `jump_passphrase`); a `user@host:port`
    jump host uses this machine's method and secrets.
    """
    return _open_client(machine, password, passphrase, jump_password, jump_passphrase,
                        time.monotonic() + timeout, timeout, registry, 0, None)


def _open_client(machine: Machine, password: str | None, passphrase: str | None,
                 jump_password: str | None, jump_passphrase: str | None, deadline: float,
                 timeout: float, registry: MachineRegistry | None, depth: int,
                 resolved: tuple[paramiko.PKey | None, str | None] | None) -> SSHClient:
    try:
        machine.validate()
    except MachineError as exc:
        raise InvalidMachine(str(exc), machine=machine.name) from None
    if depth > 4:
        raise InvalidMachine("Too many jump hosts (or a loop of them).", machine=machine.name)
    pkey, pw = resolved or (None, None)  # an ad-hoc jump host reuses the target's secrets
    if machine.auth == "agent":
        secrets.check_agent(machine)
    elif resolved is None and machine.auth == "password":
        pw = secrets.password_for(machine, password)
    elif resolved is None and machine.auth == "key":
        pkey = secrets.load_private_key(machine, passphrase)
    try:
        jump_info = resolve_jump(machine, registry)
    except MachineError as exc:
        raise InvalidMachine(str(exc), machine=machine.name) from None
    jump_client: SSHClient | None = None
    sock: socket.socket | paramiko.Channel
    if jump_info is not None:
        via, registered = jump_info
        try:
            jump_client = _open_client(via, jump_password, jump_passphrase, None, None,
                                       deadline, timeout, registry, depth + 1,
                                       None if registered else (pkey, pw))
        except ConnectError as exc:
            msg = f"Jump host {via.name}: {exc.message}"
            exc.message, exc.args = msg, (msg,)
            raise
        try:
            sock = _tunnel(jump_client, via, machine, deadline, timeout)
        except ConnectError:
            jump_client.close()
            raise
    else:
        sock = _open_socket(machine, deadline, timeout)
    client = SSHClient()
    client.machine, client.jump = machine, jump_client
    try:
        _handshake(client, machine, sock, pkey, pw, deadline, timeout)
    except BaseException:
        client.close()
        sock.close()
        raise
    log.info("connected to %s (%s)", machine.name, machine.address)
    return client


def _handshake(client: SSHClient, machine: Machine, sock: socket.socket | paramiko.Channel,
               pkey: paramiko.PKey | None, password: str | None, deadline: float,
               timeout: float) -> None:
    load_into(client)
    client.set_missing_host_key_policy(_RejectUnknown(machine))
    left = max(0.1, _left(deadline))
    watchdog = threading.Timer(left, client.close)  # the whole handshake ends by the deadline
    watchdog.daemon = True
    watchdog.start()
    name, addr = machine.name, machine.address
    try:
        client.connect(
            machine.host, machine.port, username=machine.user, sock=sock, timeout=left,
            banner_timeout=left, auth_timeout=left, channel_timeout=left, pkey=pkey,
            password=password, allow_agent=machine.auth == "agent", look_for_keys=False,
        )
    except (UnknownHostKeyError, ChangedHostKeyError):
        raise
    except paramiko.BadHostKeyException as exc:
        got, want = exc.key, exc.expected_key
        raise ChangedHostKeyError(
            machine.host, machine.port, got.get_name(), fingerprint_sha256(got),
            want.get_name(), fingerprint_sha256(want), machine=name,
        ) from None
    except paramiko.BadAuthenticationType as exc:
        allowed = ", ".join(exc.allowed_types) or "nothing"
        raise AuthMethodRefused(
            f"{addr} does not accept sign-in by {AUTH_LABELS[machine.auth]} (it accepts: "
            f"{allowed}).", machine=name,
        ) from None
    except paramiko.AuthenticationException:
        if _left(deadline) <= 0:
            raise ConnectTimeout(f"{addr} did not finish signing in within {timeout:g} s.",
                                 machine=name) from None
        if machine.auth == "password":
            raise WrongPassword(
                f"The password for {addr} was not accepted: wrong password (or the account "
                "does not allow password sign-in).", machine=name,
            ) from None
        if machine.auth == "key":
            raise KeyRefused(
                f"{addr} did not accept the key {machine.key_path}: its public key is not in "
                "the user's authorized_keys there (use \"Install my public key\").", machine=name,
            ) from None
        raise KeyRefused(f"{addr} accepted none of the ssh-agent's keys.", machine=name) from None
    except (paramiko.SSHException, OSError, EOFError) as exc:
        if _left(deadline) <= 0 or isinstance(exc, TimeoutError):
            raise ConnectTimeout(f"{addr} did not answer within {timeout:g} s.",
                                 machine=name) from None
        if "banner" in str(exc).lower():
            raise SshProtocolError(
                f"{machine.host} port {machine.port} did not answer like an SSH server: check "
                "the port.", machine=name,
            ) from None
        raise SshProtocolError(f"SSH with {addr} failed: {exc or type(exc).__name__}.",
                               machine=name) from None
    finally:
        watchdog.cancel()
    transport = client.get_transport()
    if transport is None or not transport.is_authenticated():  # the watchdog won the race
        raise ConnectTimeout(f"{addr} did not answer within {timeout:g} s.", machine=name)


# Runs via run_script with LINE and KEY_ID as $1 and $2: the key is data, never code.
_INSTALL_KEY = r"""
set -e
umask 077
mkdir -p "$HOME/.ssh"
chmod 700 "$HOME/.ssh"
f="$HOME/.ssh/authorized_keys"
[ -e "$f" ] || : > "$f"
chmod 600 "$f"
if grep -qF -- "$2" "$f"; then echo present; exit 0; fi
if [ -s "$f" ] && [ -n "$(tail -c 1 "$f")" ]; then echo >> "$f"; fi
printf '%s\n' "$1" >> "$f"
echo added
"""


def install_public_key(
    machine: Machine, password: str | None, pubkey_path: str, *, timeout: float = 10.0,
    registry: MachineRegistry | None = None,
) -> bool:
    """Append the public key to ~/.ssh/authorized_keys on `machine`, signing in with the
    password this once. Idempotent: returns False when the key was already there."""
    line = secrets.read_public_key(pubkey_path)
    client = connect(replace(machine, auth="password"), password=password, timeout=timeout,
                     registry=registry)
    try:
        key_id = " ".join(line.split()[:2])
        code, out, err = run_script(client, _INSTALL_KEY, [line, key_id],
                                    timeout=max(timeout, 15.0))
    finally:
        client.close()
    if code != 0 or out.strip() not in ("added", "present"):
        raise ConnectError(f"Installing the key on {machine.address} failed: "
                           f"{(err or out).strip()[-300:] or f'exit code {code}'}",
                           machine=machine.name)
    return out.strip() == "added"
