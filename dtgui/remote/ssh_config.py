"""Import machines from an OpenSSH client config (~/.ssh/config) with paramiko.SSHConfig.

Each concrete `Host` alias becomes a machine named after it (HostName, Port, User,
IdentityFile, ProxyJump). Wildcard and negated patterns (`*`, `?`, `!`) are settings for
other hosts, not machines, and are skipped. Entries that would not be valid machines are
reported, not imported.
"""

from __future__ import annotations

import getpass
import os
from pathlib import Path

import paramiko

from dtgui.core.machines.registry import Machine, MachineError

DEFAULT_PATH = "~/.ssh/config"


def read_ssh_config(path: str | Path = DEFAULT_PATH) -> tuple[list[Machine], list[str]]:
    """(machines, problems): one plain sentence per alias that could not be imported."""
    path = Path(os.path.expanduser(str(path)))
    try:
        config = paramiko.SSHConfig.from_path(str(path))
    except FileNotFoundError:
        return [], [f"{path} does not exist."]
    except (OSError, UnicodeDecodeError) as exc:
        return [], [f"{path} could not be read ({exc})."]
    except Exception as exc:  # noqa: BLE001 - paramiko's parser on a malformed file
        return [], [f"{path} could not be parsed ({type(exc).__name__}: {exc})."]
    machines: list[Machine] = []
    problems: list[str] = []
    seen: set[str] = set()
    for alias in _aliases(path):
        if alias in seen or any(c in alias for c in "*?!"):
            continue
        seen.add(alias)
        try:
            entry = config.lookup(alias)
        except Exception as exc:  # noqa: BLE001 - e.g. `Match exec` without invoke installed
            problems.append(f"{alias}: its settings could not be worked out ({exc}).")
            continue
        try:
            machines.append(_machine(alias, entry))
        except MachineError as exc:
            problems.append(f"{alias}: {exc}")
    return machines, problems


def _aliases(path: Path) -> list[str]:
    """Host aliases in file order (paramiko's get_hostnames() is an unordered set)."""
    aliases: list[str] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        words = line.strip().replace("=", " ", 1).split()
        if len(words) >= 2 and words[0].lower() == "host":
            aliases.extend(w.strip("\"'") for w in words[1:])
    return aliases


def _machine(alias: str, entry: paramiko.SSHConfigDict) -> Machine:
    if entry.get("proxycommand") and not entry.get("proxyjump"):
        raise MachineError("it uses ProxyCommand, which dtgui does not run; use ProxyJump.")
    identity: list[str] = (  # every IdentityFile line
        entry.get("identityfile") or [])  # type: ignore[assignment]  # a list; stubs say str
    jump = str(entry.get("proxyjump") or "").strip()
    if jump.lower() == "none":
        jump = ""
    if "," in jump:
        raise MachineError(f"ProxyJump {jump!r} chains several hosts; dtgui takes one jump host.")
    port = entry.get("port", "22")
    try:
        port_number = int(port)
    except ValueError:
        raise MachineError(f"Port {port!r} is not a number.") from None
    return Machine(
        name=alias,
        host=str(entry.get("hostname") or alias),
        port=port_number,
        user=str(entry.get("user") or getpass.getuser()),
        auth="key" if identity else "agent",
        key_file=_home_relative(identity[0]) if identity else "",
        jump_host=jump,
    ).validate()


def _home_relative(path: str) -> str:
    home = os.path.expanduser("~")
    expanded = os.path.expanduser(path)
    if expanded == home or expanded.startswith(home + os.sep):
        return "~" + expanded[len(home):]
    return expanded
