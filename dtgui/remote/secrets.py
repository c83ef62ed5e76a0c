"""Passwords and key passphrases, kept only in the OS keyring under the service "dtgui".

Entries are named `password:<machine name>` and `passphrase:<machine name>`. Nothing here
writes a secret anywhere else, and nothing logs one.

With no usable keyring (the `fail` backend, a locked or broken Secret Service), every call
raises `KeyringUnavailable` with a plain message; the caller then asks for the secret each
time it is needed and passes it to `connect` directly.
"""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import keyring
import keyring.errors
import paramiko

from dtgui.core.machines.registry import Machine, MachineRegistry
from dtgui.remote.hostkeys import ConnectError

SERVICE = "dtgui"
KINDS = ("password", "passphrase")

_NO_KEYRING = (
    "No usable password store (OS keyring) was found{why}. dtgui will ask for passwords and "
    "key passphrases each time instead of remembering them. To have them remembered, install "
    "and unlock a Secret Service keyring (GNOME Keyring or KWallet) and restart dtgui."
)


class KeyringUnavailable(RuntimeError):
    """There is no keyring to remember secrets in; ask the person each time instead."""

    def __init__(self, detail: str = "") -> None:
        why = f" ({detail})" if detail else ""
        super().__init__(_NO_KEYRING.format(why=why))
        self.detail = detail


class SecretRequired(ConnectError):
    """A password or key passphrase is needed and none was given or remembered: ask for
    `kind` ("password" / "passphrase") of `machine`, then connect again with it."""

    def __init__(self, message: str, *, machine: str, kind: str) -> None:
        super().__init__(message, machine=machine)
        self.kind = kind


class WrongPassphrase(ConnectError): ...
class KeyFileError(ConnectError): ...
class AgentUnavailable(ConnectError): ...


def _entry(machine: str, kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown secret kind {kind!r}")
    return f"{kind}:{machine}"


def _backend() -> keyring.backend.KeyringBackend:
    try:
        backend = keyring.get_keyring()
    except Exception as exc:  # noqa: BLE001 - a backend that fails while being chosen, however
        raise KeyringUnavailable(type(exc).__name__) from None
    if _is_fail(backend):
        raise KeyringUnavailable("no keyring backend is installed or running")
    return backend


def _is_fail(backend: object) -> bool:
    import keyring.backends.fail

    if isinstance(backend, keyring.backends.fail.Keyring):
        return True
    chained = getattr(backend, "backends", None)
    return chained is not None and not list(chained)


def _failure(exc: Exception) -> KeyringUnavailable:
    # Only the exception type: some backends put details of the request in the text.
    if isinstance(exc, keyring.errors.KeyringLocked):
        return KeyringUnavailable("the keyring is locked")
    return KeyringUnavailable(f"the keyring failed: {type(exc).__name__}")


def backend_name() -> str:
    """A short name of the keyring in use, or "" when there is none."""
    try:
        backend = _backend()
    except KeyringUnavailable:
        return ""
    return f"{type(backend).__module__}.{type(backend).__name__}"


def storage_note() -> str:
    """A warning to show next to "remember password", or "" when the store is a real keyring."""
    name = backend_name()
    if not name:
        return str(KeyringUnavailable())
    if name.startswith("keyrings.alt.file.Plaintext"):
        return (
            "Secrets are remembered in a plain file (keyrings.alt), not an encrypted keyring: "
            "install GNOME Keyring or KWallet for a safer store."
        )
    return ""


def available() -> bool:
    try:
        _backend()
        return True
    except KeyringUnavailable:
        return False


def get_secret(machine: str, kind: str) -> str | None:
    """The remembered secret, or None. Raises KeyringUnavailable."""
    backend = _backend()
    try:
        return backend.get_password(SERVICE, _entry(machine, kind))
    except keyring.errors.KeyringError as exc:
        raise _failure(exc) from None
    except Exception as exc:  # noqa: BLE001 - D-Bus errors surface as their own types
        raise _failure(exc) from None


def set_secret(machine: str, kind: str, value: str) -> None:
    """Remember a secret (an empty value forgets it). Raises KeyringUnavailable."""
    if not value:
        delete_secret(machine, kind)
        return
    backend = _backend()
    try:
        backend.set_password(SERVICE, _entry(machine, kind), value)
    except Exception as exc:  # noqa: BLE001 - each backend fails with its own types
        raise _failure(exc) from None


def delete_secret(machine: str, kind: str) -> None:
    """Forget a secret; a missing one is fine. Raises KeyringUnavailable."""
    backend = _backend()
    try:
        backend.delete_password(SERVICE, _entry(machine, kind))
    except keyring.errors.PasswordDeleteError:
        pass
    except Exception as exc:  # noqa: BLE001 - each backend fails with its own types
        raise _failure(exc) from None


def delete_secrets(machine: str) -> None:
    for kind in KINDS:
        delete_secret(machine, kind)


def remove_machine(registry: MachineRegistry, name: str) -> tuple[Machine, str]:
    """Remove a machine and its secrets. Returns (machine, message); the message is not
    empty when the keyring could not be reached (the machine is removed anyway)."""
    machine = registry.remove(name)
    try:
        delete_secrets(machine.name)
    except KeyringUnavailable as exc:
        return machine, str(exc)
    return machine, ""


def update_machine(registry: MachineRegistry, name: str, machine: Machine) -> tuple[Machine, str]:
    """Save an edited machine; its secrets follow a rename, and the ones its sign-in method
    no longer uses are forgotten. Returns (machine, message) like `remove_machine`."""
    old = registry.get(name)
    registry.update(name, machine)
    try:
        moved: dict[str, str] = {}
        if old.name != machine.name:
            for kind in KINDS:
                value = get_secret(old.name, kind)
                if value:
                    moved[kind] = value
            delete_secrets(old.name)
            for kind, value in moved.items():
                set_secret(machine.name, kind, value)
        if machine.auth != "password":
            delete_secret(machine.name, "password")
        if machine.auth != "key":
            delete_secret(machine.name, "passphrase")
    except KeyringUnavailable as exc:
        return machine, str(exc)
    return machine, ""


# -- credentials for connecting (used by dtgui.remote.connection) ------------------------------
def _remembered(machine: Machine, kind: str) -> tuple[str | None, str]:
    try:
        return get_secret(machine.name, kind), ""
    except KeyringUnavailable as exc:
        return None, f" {exc}"


def password_for(machine: Machine, given: str | None) -> str:
    """The password to sign in with: the one given, else the remembered one."""
    if given:
        return given
    value, note = _remembered(machine, "password")
    if value:
        return value
    raise SecretRequired(
        f"Enter the password of {machine.address}.{note}", machine=machine.name, kind="password"
    )


def load_private_key(machine: Machine, passphrase: str | None) -> paramiko.PKey:
    """The machine's private key, decrypted with the passphrase given or remembered."""
    path = machine.key_path
    if not path.is_file():
        raise KeyFileError(f"The key file {path} does not exist.", machine=machine.name)
    try:
        return paramiko.PKey.from_path(path)
    except TypeError as exc:  # cryptography: "... password-protected ..." / "... encrypted"
        if "password" not in str(exc).lower() and "encrypt" not in str(exc).lower():
            raise KeyFileError(f"The key file {path} could not be read: {exc}.",
                               machine=machine.name) from None
    except PermissionError:
        raise KeyFileError(f"You may not read the key file {path}.",
                           machine=machine.name) from None
    except Exception:  # noqa: BLE001 - whatever the key parsers raise on a file they cannot read
        raise KeyFileError(
            f"{path} is not a private key dtgui can read (OpenSSH or PEM: RSA, ECDSA, Ed25519).",
            machine=machine.name,
        ) from None
    remembered = False
    if not passphrase:
        passphrase, note = _remembered(machine, "passphrase")
        remembered = bool(passphrase)
        if not passphrase:
            raise SecretRequired(
                f"The key file {path} is protected: enter its passphrase.{note}",
                machine=machine.name, kind="passphrase",
            )
    try:
        # bytes: cryptography takes no str password (the stubs follow paramiko's docstring)
        secret = passphrase.encode("utf-8")
        return paramiko.PKey.from_path(path, secret)  # type: ignore[arg-type]  # bytes, see above
    except Exception:  # noqa: BLE001 - the key parsers fail on a wrong passphrase in many ways
        which = "The remembered passphrase" if remembered else "The passphrase"
        raise WrongPassphrase(
            f"{which} of the key file {path} is wrong.", machine=machine.name
        ) from None


def check_agent(machine: Machine) -> None:
    """Raise AgentUnavailable unless an ssh-agent offers at least one key."""
    try:
        agent = paramiko.Agent()
        try:
            if agent.get_keys():
                return
        finally:
            agent.close()
        why = "holds no keys (add one with ssh-add)"
    except Exception:  # noqa: BLE001 - a stale SSH_AUTH_SOCK fails in many ways
        why = "could not be reached (is SSH_AUTH_SOCK stale?)"
    sock = os.environ.get("SSH_AUTH_SOCK", "")
    if not sock:
        why = "is not running (SSH_AUTH_SOCK is not set)"
    elif not os.path.exists(sock):
        why = f"is not running ({sock} does not exist)"
    raise AgentUnavailable(
        f"{machine.name} signs in with ssh-agent, but the agent {why}. Start it, or choose a "
        "key file or password for this machine.", machine=machine.name,
    )


def read_public_key(path: str | Path) -> str:
    """The one line of an OpenSSH public key file, checked to be a key and nothing else."""
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"The public key file {path} could not be read ({exc}).") from None
    parts = text.split()
    problem = "" if len(text.splitlines()) == 1 and len(parts) >= 2 else "not one key line"
    if not problem:
        try:
            blob = base64.b64decode(parts[1], validate=True)
            size = int.from_bytes(blob[:4], "big")
            if blob[4 : 4 + size].decode("ascii") != parts[0]:
                problem = "the key type does not match the key"
        except (ValueError, UnicodeDecodeError):
            problem = "the key is not valid base64"
    if problem:
        raise KeyFileError(f"{path} is not an OpenSSH public key ({problem}).")
    return text



@contextlib.contextmanager
def using_keyring(backend: keyring.backend.KeyringBackend) -> Iterator[keyring.backend.KeyringBackend]:
    """Use `backend` for the duration (tests, or a dialog that picked a store)."""
    previous = keyring.get_keyring()
    keyring.set_keyring(backend)
    try:
        yield backend
    finally:
        keyring.set_keyring(previous)
