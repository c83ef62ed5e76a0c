"""Connecting to registered machines with the secrets given during a session (no Qt).

`Secrets` holds the passwords and key passphrases a person typed during a session (machine
name -> kind -> value), in memory only; the run watcher gets them on its stdin, never from a
file, its command line or its environment. `Connector` turns a `Machine` into an
authenticated SSH client with those secrets (for the machine and for its registered jump
host; any not given come from the keyring). The Machines panel's dialogs, a launch, a
reattach and the headless watcher all connect through it.

Nothing here asks a question: an unknown host key or a missing secret is raised
(`dtgui.remote.connection`), for a dialog to answer or, headless, as the reason it failed.
Importing this module is cheap (paramiko is imported on the first connection).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from dtgui.core.machines.registry import Machine, MachineRegistry
from dtgui.remote.parallel import each

if TYPE_CHECKING:
    from dtgui.remote.connection import SSHClient

CONNECT_TIMEOUT = 10.0
GivenSecrets = Mapping[str, Mapping[str, str]]  # machine name -> kind -> value


class Secrets:
    """Passwords and passphrases given during a session: machine name -> kind ("password",
    "passphrase") -> value. Thread-safe; held in memory only."""

    def __init__(self, initial: GivenSecrets | None = None) -> None:
        self._lock = threading.Lock()
        self._values = {str(k): {str(kind): str(v) for kind, v in kinds.items()}
                        for k, kinds in (initial or {}).items()}

    def get(self, name: str | None, kind: str) -> str | None:
        if not name:
            return None
        with self._lock:
            return self._values.get(name, {}).get(kind) or None

    def set(self, name: str, kind: str, value: str) -> None:
        with self._lock:
            self._values.setdefault(name, {})[kind] = value

    def as_dict(self) -> dict[str, dict[str, str]]:
        """A copy without empty values (for the run watcher's stdin, never a file)."""
        with self._lock:
            return {name: {k: v for k, v in kinds.items() if v}
                    for name, kinds in self._values.items()}

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)


class Connector:
    """Machine -> connected SSH client, with the given secrets.

    `clients`: connections made already (by the UI, which asked the person): each is handed
    out once, while it is alive; after that (a dropped connection during a run) the machine
    is connected again with the same secrets."""

    def __init__(self, secrets: Secrets | GivenSecrets | None = None,
                 registry: MachineRegistry | None = None, *,
                 timeout: float = CONNECT_TIMEOUT,
                 clients: Mapping[str, SSHClient] | None = None) -> None:
        self.secrets = secrets if isinstance(secrets, Secrets) else Secrets(secrets)
        self.registry = registry
        self.timeout = timeout
        self._clients = dict(clients or {})
        self._lock = threading.Lock()

    def __call__(self, machine: Machine) -> SSHClient:
        with self._lock:
            client = self._clients.pop(machine.name, None)
        transport = client.get_transport() if client is not None else None
        if client is not None and transport is not None and transport.is_active():
            return client
        return self.connect(machine)

    def connect(self, machine: Machine) -> SSHClient:
        """A new connection (blocks up to the timeout; raises a ConnectError)."""
        from dtgui.remote.connection import connect

        registry = self.registry
        jump = registry.find(machine.jump_host) if registry and machine.jump_host.strip() \
            else None
        jump_name = jump.name if jump is not None else None
        given = self.secrets
        return connect(machine, password=given.get(machine.name, "password"),
                       passphrase=given.get(machine.name, "passphrase"), timeout=self.timeout,
                       registry=registry, jump_password=given.get(jump_name, "password"),
                       jump_passphrase=given.get(jump_name, "passphrase"))

    def connect_all(self, machines: Sequence[Machine]) -> list[SSHClient | Exception]:
        """Every machine at once (`__call__` each); in order, the client or what was raised."""
        return each(self, machines, name="dtgui-connect")

    def close_unused(self) -> None:
        """Close the connections given at the start that nobody took."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            with contextlib.suppress(Exception):
                client.close()
