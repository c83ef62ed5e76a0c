"""Remote machines the user registered: what they are, how to reach them, where they are kept.

Pure Python (no paramiko, no Qt, no TensorFlow). Secrets are never part of a `Machine`: they
live in the OS keyring (`dtgui.remote.secrets`). The registry is a TOML file,
`config_dir()/machines.toml`, with a schema version, written atomically; a file that cannot
be read is moved aside to `machines.toml.corrupt-<time>` and the app goes on with no machines,
with a message saying so.

Validation refuses what can never be valid where a value reaches a network address or a
command line (host, user, port). Free-text fields (name, key file, jump host, Python) may
hold anything printable on one line; they are stored as data and quoted wherever used.
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import tomli_w

from dtgui.core.machines.hardware import GpuInfo, MachineFacts, TfView
from dtgui.core.settings import atomic_write_text, config_dir
from dtgui.core.slurm import SlurmDefaults, SlurmError
from dtgui.core.slurm_answers import ClusterFacts

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

SCHEMA = 1
AUTH_METHODS = ("agent", "key", "password")
AUTH_LABELS = {"agent": "ssh-agent", "key": "key file", "password": "password"}

_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_JUMP = re.compile(r"(?:(?P<user>[^@\s]+)@)?(?P<host>\[[^\]]+\]|[^:@\s\[\]]+)(?::(?P<port>\d+))?")


class MachineError(ValueError):
    """A machine value that cannot be used; the message says which field and why."""


def host_problem(host: str) -> str:
    """Why `host` is not a host name or IP address, or "" when it is one."""
    if not host:
        return "The host is empty: give a host name (gpu1.lab.example) or an IP address."
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(text)
        return ""
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    if len(name) > 253 or not name or not all(_LABEL.fullmatch(p) for p in name.split(".")):
        return (
            f"The host {host!r} is not a host name or IP address: use letters, digits, "
            "'-' and '.' only (no spaces, quotes or shell characters)."
        )
    return ""


def user_problem(user: str) -> str:
    if not user:
        return "The user name is empty."
    if not _USER.fullmatch(user):
        return (
            f"The user name {user!r} is not a valid login name: use letters, digits, "
            "'_', '.' and '-' only, starting with a letter, digit or '_'."
        )
    return ""


def port_problem(port: Any) -> str:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        return f"The port {port!r} must be a whole number from 1 to 65535 (SSH uses 22)."
    return ""


def parse_port(text: str | int) -> int:
    """A port typed by a person; raises MachineError with a plain message."""
    try:
        port = int(str(text).strip())
    except ValueError:
        raise MachineError(port_problem(text)) from None
    problem = port_problem(port)
    if problem:
        raise MachineError(problem)
    return port


def parse_jump_spec(spec: str) -> tuple[str, str, int] | None:
    """`[user@]host[:port]` -> (user, host, port); None when it is not one (a machine name).

    The user is "" when not given; the port is 22 when not given.
    """
    m = _JUMP.fullmatch(spec.strip())
    if not m:
        return None
    host = m.group("host")
    if host.startswith("["):
        host = host[1:-1]
    port = int(m.group("port")) if m.group("port") else 22
    user = m.group("user") or ""
    if host_problem(host) or port_problem(port) or (user and user_problem(user)):
        return None
    return user, host, port


@dataclass
class Machine:
    name: str
    host: str
    port: int = 22
    user: str = ""
    auth: str = "agent"  # "agent" | "key" | "password"
    key_file: str = ""  # for auth == "key"; "~" is expanded when used
    jump_host: str = ""  # "" | a registered machine's name | "[user@]host[:port]"
    python: str = ""  # the interpreter with TensorFlow there; "" = python3 (quoted when used)
    slurm: SlurmDefaults | None = None  # a Slurm cluster's login node: its jobs' defaults

    @property
    def is_slurm(self) -> bool:
        return self.slurm is not None

    def problems(self) -> list[str]:
        """Every reason this machine cannot be used, in plain words (empty when valid)."""
        out: list[str] = []
        name = self.name if isinstance(self.name, str) else ""
        if not name.strip():
            out.append("The machine needs a name.")
        elif len(name) > 100 or _CONTROL.search(name):
            out.append("The name must be one line of at most 100 characters.")
        for problem in (host_problem(self.host), user_problem(self.user), port_problem(self.port)):
            if problem:
                out.append(problem)
        if self.auth not in AUTH_METHODS:
            out.append(f"The sign-in method {self.auth!r} is not one of: ssh-agent, key file, password.")
        if self.auth == "key" and not self.key_file.strip():
            out.append("Choose the private key file (for example ~/.ssh/id_ed25519).")
        if _CONTROL.search(self.key_file) or len(self.key_file) > 4096:
            out.append("The key file path must be one line.")
        if _CONTROL.search(self.jump_host) or len(self.jump_host) > 300:
            out.append("The jump host must be one line.")
        elif self.jump_host.strip() and self.jump_host.strip().casefold() == name.strip().casefold():
            out.append("A machine cannot be its own jump host.")
        if _CONTROL.search(self.python) or len(self.python) > 4096:
            out.append("The Python interpreter must be one line (a path or a command name).")
        if self.slurm is not None:
            out += self.slurm.problems()
        return out

    def validate(self) -> Machine:
        problems = self.problems()
        if problems:
            raise MachineError(" ".join(problems))
        return self

    @property
    def interpreter(self) -> str:
        """The Python to run there: the registered one, else `python3` from the login PATH."""
        return self.python.strip() or "python3"

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user}@{host}:{self.port}"

    @property
    def key_path(self) -> Path:
        return Path(os.path.expanduser(self.key_file))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("slurm")  # TOML has no null: a machine that is no cluster has no table
        if self.slurm is not None:
            data["slurm"] = self.slurm.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Machine:
        if not isinstance(data, dict):
            raise MachineError("A machine entry is not a table.")
        try:
            machine = cls(
                name=str(data["name"]),
                host=str(data["host"]),
                port=data.get("port", 22),
                user=str(data.get("user", "")),
                auth=str(data.get("auth", "agent")),
                key_file=str(data.get("key_file", "")),
                jump_host=str(data.get("jump_host", "")),
                python=str(data.get("python", "")),
                slurm=SlurmDefaults.from_dict(data["slurm"]) if "slurm" in data else None,
            )
        except SlurmError as exc:
            raise MachineError(f"The Slurm settings of {data.get('name')!r}: {exc}") from None
        except KeyError as exc:
            raise MachineError(f"A machine entry has no {exc.args[0]!r}.") from None
        return machine.validate()


@dataclass
class RemoteFacts:
    """What a probe found on a remote machine."""

    hostname: str = ""
    os_name: str = ""  # PRETTY_NAME from /etc/os-release, else uname -s
    kernel: str = ""  # uname -sr
    arch: str = ""
    cpu_model: str = ""
    cpu_cores: int = 0
    ram_total: int = 0  # bytes
    python_command: str = "python3"  # the interpreter asked for (the machine's Python field)
    python_path: str = ""  # where python_command was found; "" when it was not
    python_version: str = ""
    tf_version: str = ""  # a version, "not installed", or "" when unknown (see tf_error)
    tf_error: str = ""
    tf_built_with_cuda: bool | None = None  # None: not reported
    tf_gpus: list[str] = field(default_factory=list)  # the GPUs TensorFlow itself can open
    gpus: list[GpuInfo] = field(default_factory=list)
    driver: str = ""
    cuda_version: str = ""  # the highest CUDA the driver supports (nvidia-smi header)
    gpu_error: str = ""  # why no GPU list: "nvidia-smi not found", its error text, ...
    warnings: list[str] = field(default_factory=list)
    cluster: ClusterFacts | None = None  # a Slurm cluster's login node: what Slurm says

    @property
    def tf_installed(self) -> bool:
        return bool(self.tf_version) and self.tf_version != "not installed"

    def as_machine_facts(self) -> MachineFacts:
        """The same shape the local machine panel shows."""
        return MachineFacts(
            hostname=self.hostname,
            os_name=self.os_name or self.kernel,
            python=self.python_version,
            cpu_model=self.cpu_model,
            cpu_cores=self.cpu_cores,
            ram_total=self.ram_total,
            gpus=list(self.gpus),
            nvml_error=self.gpu_error,
            tf=TfView(
                version=self.tf_version if self.tf_installed else "",
                gpus=tuple(self.tf_gpus),
                built_with_cuda=bool(self.tf_built_with_cuda),
                error=self.tf_error or ("" if self.tf_installed else "TensorFlow is not installed"),
            ),
        )


def machines_file() -> Path:
    return config_dir() / "machines.toml"


class MachineRegistry:
    """The registered machines, kept in `machines.toml`. Every change is saved at once.

    `message` holds what a person should be told after loading ("" when all went well).
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or machines_file()
        self._machines: list[Machine] = []
        self.message = ""
        self.load()

    # -- file -------------------------------------------------------------------------------
    def load(self) -> str:
        self._machines = []
        self.message = ""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return ""
        except OSError as exc:
            self.message = f"{self.path} could not be read ({exc.strerror}); no machines loaded."
            return self.message
        try:
            data = tomllib.loads(raw.decode("utf-8"))
            entries = data.get("machines", [])
            if not isinstance(entries, list):
                raise ValueError("machines is not a list")
        except (UnicodeDecodeError, ValueError) as exc:
            backup = self._backup()
            self.message = (
                f"The machine list {self.path.name} was damaged ({exc}); it was kept as "
                f"{backup} and dtgui starts with no machines."
            )
            return self.message
        notes: list[str] = []
        schema = data.get("schema")
        if schema != SCHEMA:
            notes.append(
                f"{self.path.name} has schema {schema!r}, this dtgui reads schema {SCHEMA}; "
                "machines were read as far as possible."
            )
        for i, entry in enumerate(entries, 1):
            try:
                machine = Machine.from_dict(entry)
                self._check_unique(machine.name)
            except MachineError as exc:
                notes.append(f"Machine entry {i} was skipped: {exc}")
                continue
            self._machines.append(machine)
        self.message = " ".join(notes)
        return self.message

    def _backup(self) -> Path:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        backup = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        n = 1
        while backup.exists():
            n += 1
            backup = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{n}")
        try:
            os.replace(self.path, backup)
        except OSError:
            return self.path
        return backup

    def to_toml(self) -> str:
        doc = {"schema": SCHEMA, "machines": [m.to_dict() for m in self._machines]}
        return tomli_w.dumps(doc)

    def save(self) -> None:
        atomic_write_text(self.path, self.to_toml())

    # -- queries ------------------------------------------------------------------------------
    def machines(self) -> list[Machine]:
        return list(self._machines)

    def names(self) -> list[str]:
        return [m.name for m in self._machines]

    def find(self, name: str) -> Machine | None:
        key = name.strip().casefold()
        return next((m for m in self._machines if m.name.strip().casefold() == key), None)

    def get(self, name: str) -> Machine:
        machine = self.find(name)
        if machine is None:
            raise MachineError(f"There is no machine named {name!r}.")
        return machine

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find(name) is not None

    def __len__(self) -> int:
        return len(self._machines)

    # -- changes ------------------------------------------------------------------------------
    def _check_unique(self, name: str, ignore: str | None = None) -> None:
        other = self.find(name)
        if other is not None and (ignore is None or other.name != ignore):
            raise MachineError(f"A machine named {other.name!r} already exists; choose another name.")

    def _check_jump(self, machine: Machine, replacing: str | None = None) -> None:
        jump = machine.jump_host.strip()
        if jump and self.find(jump) is None and parse_jump_spec(jump) is None:
            raise MachineError(
                f"The jump host {jump!r} is neither a registered machine nor user@host:port."
            )
        here = {machine.name.strip().casefold(), (replacing or machine.name).strip().casefold()}
        seen: set[str] = set()
        while jump and jump.casefold() not in seen:  # registered jumps must not lead back here
            if jump.casefold() in here:
                raise MachineError(f"The jump hosts of {machine.name!r} form a loop.")
            seen.add(jump.casefold())
            nxt = self.find(jump)
            jump = nxt.jump_host.strip() if nxt is not None else ""

    def add(self, machine: Machine) -> Machine:
        machine.validate()
        self._check_unique(machine.name)
        self._check_jump(machine)
        self._machines.append(machine)
        self.save()
        return machine

    def update(self, name: str, machine: Machine) -> Machine:
        """Replace the machine called `name` (which may be renamed to `machine.name`)."""
        old = self.get(name)
        machine.validate()
        self._check_unique(machine.name, ignore=old.name)
        self._check_jump(machine, replacing=old.name)
        self._machines[self._machines.index(old)] = machine
        if old.name != machine.name:
            for m in self._machines:
                if m.jump_host.strip() == old.name:
                    m.jump_host = machine.name
        self.save()
        return machine

    def remove(self, name: str) -> Machine:
        """Remove a machine. Its secrets are removed by `dtgui.remote.secrets.remove_machine`."""
        old = self.get(name)
        users = [m.name for m in self._machines if m.jump_host.strip() == old.name]
        if users:
            raise MachineError(
                f"{old.name!r} is the jump host of {', '.join(users)}; change those first."
            )
        self._machines.remove(old)
        self.save()
        return old


def ssh_login(machine: Machine, known: Sequence[Machine] = ()) -> dict[str, str]:
    """How plain OpenSSH reaches `machine`, for a bundle's README: {"login": "user@host:port"}
    and, through a jump host, {"jump": an `ssh -J` argument} - a registered machine's address
    when `known` holds it, else the spec as given ([user@]host[:port])."""
    info = {"login": machine.address}
    spec = machine.jump_host.strip()
    if spec:
        found = next((m for m in known if m.name.casefold() == spec.casefold()), None)
        info["jump"] = found.address if found is not None else spec
    return info


def resolve_jump(
    machine: Machine, registry: MachineRegistry | None = None
) -> tuple[Machine, bool] | None:
    """The machine to jump through, and whether it is a registered one; None without a jump.

    A registered machine's name wins; else `[user@]host[:port]` becomes an ad-hoc machine
    with this machine's user (when none is given) and sign-in method. `registry` defaults to
    the saved one.
    """
    spec = machine.jump_host.strip()
    if not spec:
        return None
    parsed = parse_jump_spec(spec)
    if registry is None and (parsed is None or "@" not in spec):
        registry = MachineRegistry()
    found = registry.find(spec) if registry is not None else None
    if found is not None:
        return found, True
    if parsed is not None:
        user, host, port = parsed
        jump = replace(machine, name=spec, host=host, port=port, user=user or machine.user,
                       jump_host="")
        return jump, False
    raise MachineError(
        f"The jump host {spec!r} of {machine.name} is neither a registered machine nor "
        "user@host:port."
    )
