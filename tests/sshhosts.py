"""Real SSH test hosts: OpenSSH sshd processes, each in its own network namespace.

As root: one namespace per host with 10.B.X.N/24 on a veth whose other end is on a bridge
in a hub namespace; the root namespace gets 10.B.X.1 on its own veth to the bridge (X is
the first 10.B.X.0/24 not in use here, so two test sessions do not collide). Where
namespaces cannot be made, several sshd listen on 127.0.0.2, 127.0.0.3, ... instead.

Logins are for one dedicated account (created when missing), with a password made up per
session and two key pairs (one with a passphrase). Everything is torn down by the PIDs and
names this module created.

Each pytest-xdist worker has a lab of its own (LAB_INDEX, from the worker's number): its own
account (`dtgui-test`, `dtgui-test1`, ...), its own 10.B (B = 200 + LAB_INDEX) and its own
lock, so the SSH tests spread over the workers like any others. One lab of an index at a
time on a machine: two test sessions would reset each other's test account.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


def _lab_index() -> int:
    """This process's lab: its pytest-xdist worker's number ("gw1" -> 1), else 0."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0


LAB_INDEX = _lab_index()
TEST_USER = "dtgui-test" + (str(LAB_INDEX) if LAB_INDEX else "")
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
# One lab of an index at a time on a machine: two test sessions would reset each other's
# test account.
LOCK_FILE = Path("/run/lock/dtgui-sshlab.lock" if not LAB_INDEX
                 else f"/run/lock/dtgui-sshlab-{LAB_INDEX}.lock")
LOCK_WAIT = 900.0
NETWORK = f"10.{200 + LAB_INDEX}"  # a lab's subnets are 10.B.X.0/24 (labs never race for one)


def unavailable_reason() -> str:
    """Why real SSH hosts cannot run here ("" when they can)."""
    if not Path(SSHD).exists():
        return "OpenSSH server (sshd) is not installed: apt-get install openssh-server"
    if not shutil.which("ssh-keygen"):
        return "ssh-keygen is not installed: apt-get install openssh-client"
    if os.geteuid() != 0:
        return "real SSH test hosts need root (a test account and sshd logins as it)"
    return ""


def _run(*args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), check=check, capture_output=True, text=True, input=input,
                          timeout=30)


def keygen(path: Path, passphrase: str = "", comment: str = "dtgui-test") -> Path:
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", comment, "-f", str(path))
    return path


def fingerprint(pub: Path) -> str:
    """The SHA256 fingerprint exactly as `ssh-keygen -lf` prints it."""
    printed: str = _run("ssh-keygen", "-lf", str(pub)).stdout
    return printed.split()[1]


@dataclass
class Host:
    name: str
    address: str
    port: int
    netns: str | None
    dir: Path
    host_pub: Path
    fingerprint: str
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.dir / "sshd.log"


class SshLab:
    def __init__(self, count: int = 3) -> None:
        self.count = count
        self.tag = f"{os.getpid() % 100000:05d}"
        self.dir = Path(tempfile.mkdtemp(prefix="dtgui-sshlab-"))
        self.dir.chmod(0o755)  # the test user reads authorized_keys here
        self.keys = self.dir / "keys"
        self.keys.mkdir(mode=0o700)
        self.mode = ""
        self.subnet = ""
        self.hosts: list[Host] = []
        self.namespaces: list[str] = []
        self.root_veth = ""
        self.unused_address = ""  # an address nothing answers on (for "unreachable")
        self.password = "dtgui-pw-" + secrets.token_hex(12)
        self.passphrase = "dtgui-pp-" + secrets.token_hex(8)
        self.home = Path()
        self.startup_seconds = 0.0
        self.notes: list[str] = []
        self._lock_fd: int | None = None

    # -- set-up -------------------------------------------------------------------------------
    def start(self) -> SshLab:
        t0 = time.monotonic()
        try:
            self._lock()
            self._user()
            self.plain_key = keygen(self.keys / "plain")
            self.pass_key = keygen(self.keys / "protected", self.passphrase)
            auth = self.dir / "authorized_keys"
            auth.write_text(
                Path(f"{self.plain_key}.pub").read_text() + Path(f"{self.pass_key}.pub").read_text()
            )
            auth.chmod(0o644)
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
            try:
                if os.environ.get("DTGUI_SSHLAB_LOOPBACK"):
                    raise OSError("DTGUI_SSHLAB_LOOPBACK is set")
                self._netns()
            except (subprocess.CalledProcessError, OSError) as exc:
                self.notes.append(f"network namespaces unavailable ({_err(exc)}); using loopback")
                self._teardown_net()
                self._loopback()
            for host in self.hosts:
                self._start_sshd(host)
            for host in self.hosts:
                self._wait_listening(host)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _lock(self) -> None:
        LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise RuntimeError(f"another test session holds {LOCK_FILE}") from None
                time.sleep(0.2)
        self._lock_fd = fd

    def _user(self) -> None:
        try:
            pwd.getpwnam(TEST_USER)
        except KeyError:
            _run("useradd", "--create-home", "--shell", "/bin/sh", TEST_USER)
        _run("chpasswd", input=f"{TEST_USER}:{self.password}\n")  # stdin: not on a command line
        self.home = Path(pwd.getpwnam(TEST_USER).pw_dir)
        self.reset_home()

    def reset_home(self) -> None:
        """Forget keys installed by earlier tests and any stray files in the test home."""
        shutil.rmtree(self.home / ".ssh", ignore_errors=True)
        for stray in self.home.glob("pwned*"):
            stray.unlink()

    def _free_subnet(self) -> str:
        used = _run("ip", "-o", "addr").stdout + _run("ip", "route").stdout
        for x in range(256):
            if f"{NETWORK}.{x}." not in used:
                return f"{NETWORK}.{x}"
        raise OSError(f"no free {NETWORK}.X.0/24")

    def _netns(self) -> None:
        self.mode = "netns"
        self.subnet = net = self._free_subnet()
        hub = f"dtg{self.tag}hub"
        _run("ip", "netns", "add", hub)
        self.namespaces.append(hub)
        _run("ip", "-n", hub, "link", "set", "lo", "up")
        _run("ip", "-n", hub, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", hub, "link", "set", "br0", "up")
        self.root_veth = f"dr{self.tag}"
        self._veth(self.root_veth, hub)
        _run("ip", "addr", "add", f"{net}.1/24", "dev", self.root_veth)
        _run("ip", "link", "set", self.root_veth, "up")
        for n in range(2, 2 + self.count):
            ns = f"dtg{self.tag}h{n}"
            _run("ip", "netns", "add", ns)
            self.namespaces.append(ns)
            veth = f"dh{self.tag}{n}"
            self._veth(veth, hub)
            _run("ip", "link", "set", veth, "netns", ns)
            _run("ip", "-n", ns, "link", "set", veth, "name", "eth0")
            _run("ip", "-n", ns, "addr", "add", f"{net}.{n}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            self.hosts.append(self._host(f"h{n}", f"{net}.{n}", 22, ns))
        self.unused_address = f"{net}.250"

    def _veth(self, name: str, hub: str) -> None:
        """A veth pair `name` <-> `name`b with the b end on the hub's bridge."""
        _run("ip", "link", "add", name, "type", "veth", "peer", "name", f"{name}b")
        _run("ip", "link", "set", f"{name}b", "netns", hub)
        _run("ip", "-n", hub, "link", "set", f"{name}b", "master", "br0")
        _run("ip", "-n", hub, "link", "set", f"{name}b", "up")

    def _loopback(self) -> None:
        self.mode = "loopback"
        for n in range(2, 2 + self.count):
            address = f"127.0.0.{n}"
            self.hosts.append(self._host(f"h{n}", address, _free_port(address), None))
        self.unused_address = "127.0.0.250"  # nothing listens there: refused at once

    def _host(self, name: str, address: str, port: int, netns: str | None) -> Host:
        d = self.dir / name
        d.mkdir(mode=0o700)
        keygen(d / "ssh_host_ed25519_key", comment=f"root@{name}")
        pub = d / "ssh_host_ed25519_key.pub"
        host = Host(name, address, port, netns, d, pub, fingerprint(pub))
        lines = [
            f"Port {port}", f"ListenAddress {address}",
            f"HostKey {d / 'ssh_host_ed25519_key'}", f"PidFile {d / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'} .ssh/authorized_keys",
            "PasswordAuthentication yes", "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes", "UsePAM no", "PermitRootLogin no", "StrictModes no",
            f"AllowUsers {TEST_USER}", "AllowTcpForwarding yes", "X11Forwarding no",
            "Subsystem sftp internal-sftp", "LogLevel VERBOSE", "MaxStartups 100",
            "MaxSessions 50", "MaxAuthTries 20",
        ]
        cfg = d / "sshd_config"
        cfg.write_text("\n".join([*lines, "PerSourcePenalties no"]) + "\n")
        if _run(SSHD, "-t", "-f", str(cfg), check=False).returncode != 0:  # OpenSSH < 9.8
            cfg.write_text("\n".join(lines) + "\n")
            check = _run(SSHD, "-t", "-f", str(cfg), check=False)
            if check.returncode != 0:
                raise RuntimeError(f"sshd rejects the test config: {check.stderr}")
        return host

    def _start_sshd(self, host: Host) -> None:
        cmd = [SSHD, "-D", "-e", "-f", str(host.dir / "sshd_config")]
        if host.netns:
            cmd = ["ip", "netns", "exec", host.netns, *cmd]
        log = host.log.open("ab")
        host.proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()

    def _wait_listening(self, host: Host) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert host.proc is not None
            if host.proc.poll() is not None:
                raise RuntimeError(f"sshd for {host.name} exited: {host.log.read_text()[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(
                (host.address, host.port), timeout=0.5
            ) as s:
                s.settimeout(2)
                if s.recv(64).startswith(b"SSH-"):
                    return
            time.sleep(0.02)
        raise RuntimeError(f"sshd for {host.name} did not answer on {host.address}:{host.port}")

    # -- tear-down ----------------------------------------------------------------------------
    def stop(self) -> None:
        for host in self.hosts:
            if host.proc is not None and host.proc.poll() is None:
                host.proc.terminate()
        for host in self.hosts:
            if host.proc is not None:
                try:
                    host.proc.wait(5)
                except subprocess.TimeoutExpired:
                    host.proc.kill()
                    host.proc.wait(5)
        self._teardown_net()
        shutil.rmtree(self.dir, ignore_errors=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def _teardown_net(self) -> None:
        for ns in reversed(self.namespaces):
            pids = _run("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:  # sshd session children left in our own namespaces
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            _run("ip", "netns", "del", ns, check=False)
        self.namespaces = []
        if self.root_veth:
            _run("ip", "link", "del", self.root_veth, check=False)
            self.root_veth = ""


def _free_port(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        port: int = s.getsockname()[1]
        return port


def _err(exc: BaseException) -> str:
    if isinstance(exc, subprocess.CalledProcessError):
        return f"{' '.join(map(str, exc.cmd))}: {(exc.stderr or '').strip()}"
    return str(exc)
