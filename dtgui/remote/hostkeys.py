"""Host keys: the app's own known_hosts file, the user's ~/.ssh/known_hosts, fingerprints.

An unknown key is never accepted silently: `connect` raises `UnknownHostKeyError` carrying the
key and its SHA256 fingerprint (the same text `ssh-keygen -lf` prints); a dialog shows it and,
when the person accepts, calls `trust_host_key`. A key that differs from the known one raises
`ChangedHostKeyError` and is never replaced by this module unless asked explicitly
(`forget_host_key`, or `trust_host_key(..., replace=True)`).

Accepted keys go to `config_dir()/known_hosts` in OpenSSH format (`[host]:port` when the port
is not 22). `~/.ssh/known_hosts` is read too (hashed entries included) and never written.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import paramiko

from dtgui.core.settings import atomic_write_text, config_dir


class ConnectError(Exception):
    """Connecting to a machine failed; `str(exc)` is one message a person can act on.

    Defined here (the lowest remote module) because host-key problems are connect errors;
    `dtgui.remote.connection` re-exports it with its other subclasses.
    """

    def __init__(self, message: str, *, machine: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.machine = machine


class UnknownHostKeyError(ConnectError):
    """The machine's key is in neither known_hosts file. Show `fingerprint`; to accept,
    call `trust_host_key(host, port, key)` and connect again."""

    def __init__(
        self, host: str, port: int, key_type: str, fingerprint: str,
        key: paramiko.PKey | None = None, *, machine: str = "",
    ) -> None:
        self.host, self.port, self.key_type, self.fingerprint, self.key = (
            host, port, key_type, fingerprint, key,
        )
        super().__init__(
            f"dtgui has not seen the host key of {host_key_name(host, port)} before. "
            f"Its {key_type} key fingerprint is {fingerprint}. Accept it only if it matches "
            "the machine's own (on the machine: ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub).",
            machine=machine,
        )


class ChangedHostKeyError(ConnectError):
    """The machine offered a key other than the one on record. Refused; never auto-fixed."""

    def __init__(
        self, host: str, port: int, key_type: str, fingerprint: str,
        expected_type: str = "", expected_fingerprint: str = "", *, machine: str = "",
    ) -> None:
        self.host, self.port, self.key_type, self.fingerprint = host, port, key_type, fingerprint
        self.expected_type, self.expected_fingerprint = expected_type, expected_fingerprint
        name = host_key_name(host, port)
        super().__init__(
            f"WARNING: the host key of {name} has CHANGED. It now offers {key_type} "
            f"{fingerprint}, but {expected_type} {expected_fingerprint} is on record. Someone "
            "may be intercepting the connection (man-in-the-middle), or the machine was "
            "reinstalled. dtgui refused to connect. If you know why the key changed, check the "
            "new fingerprint on the machine itself, then remove the old key deliberately: "
            f"ssh-keygen -R '{name}' -f {app_known_hosts()} (and -f ~/.ssh/known_hosts if it "
            "is there), and connect again.",
            machine=machine,
        )


def app_known_hosts() -> Path:
    return config_dir() / "known_hosts"


def user_known_hosts() -> Path:
    return Path(os.path.expanduser("~/.ssh/known_hosts"))


def host_key_name(host: str, port: int) -> str:
    """The name a known_hosts line uses: `host` for port 22, else `[host]:port`."""
    return host if port == 22 else f"[{host}]:{port}"


def fingerprint_sha256(key: paramiko.PKey) -> str:
    """`SHA256:<base64, no padding>`: the same text `ssh-keygen -lf` prints."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def _read_into(keys: paramiko.HostKeys, path: Path) -> None:
    """Add every readable line of an OpenSSH known_hosts file; a bad line is skipped."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError):
        return
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "@")):
            continue
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line, lineno)
        except Exception:  # noqa: BLE001 - a line paramiko cannot parse (bad base64, unknown type, ...) is skipped
            continue
        if entry is not None and entry.key is not None:
            for name in entry.hostnames:
                keys.add(name, entry.key.get_name(), entry.key)


def load_known_hosts(keys: paramiko.HostKeys | None = None) -> paramiko.HostKeys:
    """Both files merged: the app's, then ~/.ssh/known_hosts (which wins for a key type)."""
    keys = keys if keys is not None else paramiko.HostKeys()
    _read_into(keys, app_known_hosts())
    _read_into(keys, user_known_hosts())
    return keys


def load_into(client: paramiko.SSHClient) -> None:
    """Give `client` the keys of both files (and nothing else)."""
    load_known_hosts(client.get_host_keys())


def known_keys(host: str, port: int) -> dict[str, paramiko.PKey]:
    """Key type -> key on record for host:port, from both files."""
    entry = load_known_hosts().lookup(host_key_name(host, port))
    return {t: entry[t] for t in entry} if entry else {}


def trust_host_key(host: str, port: int, key: paramiko.PKey, *, replace: bool = False) -> None:
    """Record `key` for host:port in the app's known_hosts (the person accepted it).

    A different key already on record raises ChangedHostKeyError unless `replace` is True
    (a deliberate choice after the person checked the new fingerprint on the machine).
    """
    known = known_keys(host, port)
    if known.get(key.get_name()) == key:
        return
    if known and not replace:
        expected = next(iter(known.values()))
        raise ChangedHostKeyError(
            host, port, key.get_name(), fingerprint_sha256(key),
            expected.get_name(), fingerprint_sha256(expected),
        )
    if replace:
        forget_host_key(host, port)
    path = app_known_hosts()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    if text and not text.endswith("\n"):
        text += "\n"
    text += f"{host_key_name(host, port)} {key.get_name()} {key.get_base64()}\n"
    atomic_write_text(path, text)


def forget_host_key(host: str, port: int) -> int:
    """Remove host:port from the app's known_hosts; returns how many lines went."""
    path = app_known_hosts()
    try:
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    except FileNotFoundError:
        return 0
    name = host_key_name(host, port)
    keep: list[str] = []
    for line in lines:
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line.strip())
        except Exception:  # noqa: BLE001 - a line paramiko cannot parse is kept as it is
            entry = None
        if entry is not None and _matches(entry.hostnames, name):
            continue
        keep.append(line)
    if len(keep) != len(lines):
        atomic_write_text(path, "".join(keep))
    return len(lines) - len(keep)


def _matches(patterns: list[str], name: str) -> bool:
    for pattern in patterns:
        if pattern.startswith("|1|") and paramiko.HostKeys.hash_host(name, pattern) == pattern:
            return True
        if pattern == name:
            return True
    return False
