"""The doctor's measurements, taken on the machines themselves over SSH.

* `check_port_free`: can the port be bound on all addresses of a machine (as TensorFlow's
  gRPC server binds it)?
* `check_reachability`: for every ordered pair (A, B), a short-lived listener runs on B and
  A opens a TCP connection to B's address and port. The listener answers with a random token,
  so a connection that reached something else (a proxy, another program) is told apart.

Every remote program is a fixed Python script fed through `sh -s` on stdin and run by the
machine's own interpreter (its Python field, default python3); the interpreter, ports,
addresses and tokens are passed as arguments, never interpolated. Everything is bounded in
time: the listener exits by itself after its lifetime or once every source connected, and is
killed by its pid if it is still there when its sources are done. Checks run in parallel
threads (paramiko channels of one connection may be used from several threads).
"""

from __future__ import annotations

import contextlib
import ipaddress
import secrets
import shlex
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import paramiko

from dtgui.core.doctor import PortProbe, ReachProbe
from dtgui.core.machines import Machine
from dtgui.remote.commands import ConnectError, run, run_script

CONNECT_TIMEOUT = 3.0
LISTENER_MARGIN = 20.0

# argv: PYTHON ARGS... The interpreter is looked up like a command (a path or a name on PATH).
_PY = r"""
py=$(command -v -- "$1" 2>/dev/null) || { echo NOPYTHON; exit 0; }
shift
exec "$py" - "$@" <<'DTGUI_PY_END'
__CODE__
DTGUI_PY_END
"""

# argv: PORT. Binds like TensorFlow's server: all addresses (IPv6 dual-stack, else IPv4).
_FREE_CODE = r"""
import re, socket, subprocess, sys
port = int(sys.argv[1])
def bind(family, addr):
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.bind((addr, port))
        s.listen(1)
    finally:
        s.close()
try:
    try:
        bind(socket.AF_INET6, "::")
    except OSError as e:
        if e.errno == 98:
            raise
        bind(socket.AF_INET, "0.0.0.0")
    print("FREE")
except OSError as e:
    if e.errno != 98:
        print("BINDERR", e.errno, e.strerror)
        sys.exit(0)
    who = ""
    try:
        out = subprocess.run(["ss", "-Hltnp", "sport = :%d" % port], capture_output=True,
                             text=True, timeout=5).stdout
        m = re.search(r'users:\(\("([^"]+)",pid=(\d+)', out)
        who = "%s, pid %s" % m.groups() if m else ""
    except Exception:
        pass
    print("BUSY", e.errno, who)
"""

# argv: BIND PORT TOKEN EXPECT LIFETIME. Prints LISTENING <pid>, ACCEPTED <addr>..., DONE <n>.
_LISTEN_CODE = r"""
import os, socket, sys, time
bind, port, token = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
expect, life = int(sys.argv[4]), float(sys.argv[5])
def make(family, addr):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6 and not addr:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    try:
        s.bind((addr or ("::" if family == socket.AF_INET6 else "0.0.0.0"), port))
    except OSError:
        s.close()
        raise
    return s
tries = [(socket.AF_INET6 if ":" in bind else socket.AF_INET, bind)] if bind else []
tries += [(socket.AF_INET6, ""), (socket.AF_INET, "")]
s, err = None, None
for family, addr in tries:
    try:
        s = make(family, addr)
        break
    except OSError as e:
        err = e
        if e.errno == 98:
            break
if s is None:
    print("BINDFAIL", err.errno, err.strerror, flush=True)
    sys.exit(0)
s.listen(64)
print("LISTENING", os.getpid(), flush=True)
end, n = time.monotonic() + life, 0
while n < expect:
    left = end - time.monotonic()
    if left <= 0:
        break
    s.settimeout(left)
    try:
        c, addr = s.accept()
    except OSError:
        break
    try:
        c.sendall(token + b"\n")
    except OSError:
        pass
    c.close()
    n += 1
    print("ACCEPTED", addr[0], flush=True)
print("DONE", n, flush=True)
"""

# argv: ADDRESS PORT TOKEN TIMEOUT. Prints RESULT <outcome> <millis> <detail>.
_CONNECT_CODE = r"""
import socket, sys, time
host, port, token, timeout = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode(), float(sys.argv[4])
def say(outcome, ms=0.0, detail=""):
    print("RESULT", outcome, "%.1f" % ms, detail, flush=True)
    sys.exit(0)
try:
    socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
except socket.gaierror as e:
    say("unresolved", 0, e.strerror or "")
t0 = time.monotonic()
try:
    c = socket.create_connection((host, port), timeout=timeout)
except socket.timeout:
    say("timeout")
except ConnectionRefusedError:
    say("refused")
except OSError as e:
    say("unreachable", 0, e.strerror or str(e))
ms = (time.monotonic() - t0) * 1000
data = b""
c.settimeout(max(0.5, timeout))
try:
    while b"\n" not in data and len(data) < 200:
        chunk = c.recv(200)
        if not chunk:
            break
        data += chunk
except OSError:
    pass
c.close()
if data.strip() == token:
    say("ok", ms)
say("other", ms, "it sent %r" % data[:40] if data else "it sent nothing")
"""


def _script(code: str) -> str:
    return _PY.replace("__CODE__", code.strip("\n"))


def _bind_address(host: str) -> str:
    """B's own address when it is an IP literal (the listener falls back to all addresses when
    that address is not on the machine, e.g. behind NAT); all addresses for a host name."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return ""


def _connect_address(host: str) -> str:
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def check_port_free(client: paramiko.SSHClient, name: str, port: int,
                    timeout: float = 20.0, *, python: str = "python3") -> PortProbe:
    try:
        code, out, err = run_script(client, _script(_FREE_CODE), [python, str(int(port))],
                                    timeout)
    except ConnectError as exc:
        return PortProbe(name, port, None, str(exc))
    words = out.split()
    if words[:1] == ["FREE"]:
        return PortProbe(name, port, True)
    if words[:1] == ["BUSY"]:
        return PortProbe(name, port, False, " ".join(words[2:]))
    if words[:1] == ["BINDERR"]:
        return PortProbe(name, port, None, "binding it failed: " + " ".join(words[2:]))
    if words[:1] == ["NOPYTHON"]:
        return PortProbe(name, port, None, f"there is no {python} on {name}")
    return PortProbe(name, port, None, (err or out).strip()[-200:] or f"exit code {code}")


class _Listener:
    """The test listener on one machine: started, waited for, stopped (killed if need be)."""

    def __init__(self, client: paramiko.SSHClient, bind: str, port: int, token: str,
                 expect: int, lifetime: float, *, python: str = "python3") -> None:
        self.client = client
        self.python = python
        self.pid = ""
        self.accepted = 0
        self.done = False
        self._buf = b""
        transport = client.get_transport()
        if transport is None or not transport.is_active():
            raise ConnectError("The connection is closed; connect again.")
        args = ["sh", "-s", "--", python, bind, str(port), token, str(expect), f"{lifetime:g}"]
        self.chan = transport.open_session(timeout=10)
        try:
            self.chan.exec_command(shlex.join(args))
            body = "{\n" + _script(_LISTEN_CODE).strip("\n") + "\n} </dev/null\n"
            self.chan.sendall(body.encode())
            self.chan.shutdown_write()
        except BaseException:
            self.chan.close()
            raise

    def _lines(self, deadline: float) -> list[str]:
        """Whatever complete lines arrive before `deadline` (or EOF)."""
        while time.monotonic() < deadline:
            if b"\n" in self._buf:
                break
            if self.chan.recv_ready():
                self._buf += self.chan.recv(4096)
                continue
            if self.chan.eof_received or self.chan.closed:
                break
            self.chan.settimeout(max(0.01, min(0.2, deadline - time.monotonic())))
            with contextlib.suppress(socket.timeout):
                chunk = self.chan.recv(4096)
                if not chunk:
                    break
                self._buf += chunk
        lines, _, self._buf = self._buf.rpartition(b"\n")
        return [ln.decode("utf-8", "replace") for ln in lines.split(b"\n") if ln] if lines else []

    def wait_ready(self, timeout: float) -> tuple[bool, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self._lines(deadline):
                words = line.split()
                if words[:1] == ["LISTENING"] and len(words) > 1 and words[1].isdigit():
                    self.pid = words[1]
                    return True, ""
                if words[:1] == ["BINDFAIL"]:
                    return False, "the test listener could not bind the port: " + " ".join(words[2:])
                if words[:1] == ["NOPYTHON"]:
                    return False, f"there is no {self.python} there"
            if self.chan.eof_received and not self._buf and not self.chan.recv_ready():
                return False, "the test listener ended before it listened"
        return False, f"the test listener did not start within {timeout:g} s"

    def stop(self) -> None:
        """Read what is left for a moment, then kill the listener if it still runs."""
        for line in self._lines(time.monotonic() + 0.3):
            if line.startswith("ACCEPTED"):
                self.accepted += 1
            elif line.startswith("DONE"):
                self.done = True
        if self.pid and not self.done:
            with contextlib.suppress(Exception):
                run(self.client, ["kill", self.pid], timeout=10)
        self.chan.close()


def try_connect(client: paramiko.SSHClient, address: str, port: int, token: str,
                timeout: float = CONNECT_TIMEOUT, *,
                python: str = "python3") -> tuple[str, float, str]:
    """(outcome, millis, detail) of a TCP connection opened on the machine of `client`."""
    args = [python, address, str(int(port)), token, f"{timeout:g}"]
    try:
        code, out, err = run_script(client, _script(_CONNECT_CODE), args, timeout + 15)
    except ConnectError as exc:
        return "untested", 0.0, str(exc)
    for line in out.splitlines():
        words = line.split(None, 3)
        if words[:1] == ["RESULT"] and len(words) >= 3:
            try:
                ms = float(words[2])
            except ValueError:
                ms = 0.0
            return words[1], ms, words[3] if len(words) > 3 else ""
        if words[:1] == ["NOPYTHON"]:
            return "untested", 0.0, f"there is no {python} on the connecting machine"
    return "untested", 0.0, (err or out).strip()[-200:] or f"exit code {code}"


def check_reachability(
    clients: Mapping[str, paramiko.SSHClient], machines: Mapping[str, Machine], port: int,
    targets: Sequence[str] | None = None, *, timeout: float = CONNECT_TIMEOUT,
    on_progress: Callable[[str], None] | None = None,
) -> list[ReachProbe]:
    """Every ordered pair (A -> B) of `clients`, B among `targets` (default: all)."""
    names = list(clients)
    targets = list(targets) if targets is not None else names
    order = {(a, b): i for i, (a, b) in enumerate((a, b) for a in names for b in names if a != b)}
    results: list[ReachProbe] = []

    def for_target(b: str) -> list[ReachProbe]:
        sources = [a for a in names if a != b]
        address = _connect_address(machines[b].host)
        token = secrets.token_hex(12)
        out: list[ReachProbe] = []
        try:
            listener = _Listener(clients[b], _bind_address(machines[b].host), port, token,
                                 len(sources), timeout + LISTENER_MARGIN,
                                 python=machines[b].interpreter)
        except (ConnectError, paramiko.SSHException, OSError) as exc:
            return [ReachProbe(a, b, address, port, "untested", f"no listener on {b}: {exc}")
                    for a in sources]
        try:
            ready, why = listener.wait_ready(15.0)
            if not ready:
                return [ReachProbe(a, b, address, port, "untested", f"on {b}, {why}")
                        for a in sources]
            with ThreadPoolExecutor(max(1, len(sources)), thread_name_prefix="dtgui-reach") as pool:
                found = list(pool.map(
                    lambda a: try_connect(clients[a], address, port, token, timeout,
                                          python=machines[a].interpreter), sources))
            for a, (outcome, ms, detail) in zip(sources, found, strict=True):
                out.append(ReachProbe(a, b, address, port, outcome, detail, ms, timeout,
                                      _connect_address(machines[a].host)))
        finally:
            listener.stop()
        if on_progress is not None:
            on_progress(f"Tested the paths to {b}.")
        return out

    if len(names) < 2:
        return []
    with ThreadPoolExecutor(min(16, len(targets)) or 1, thread_name_prefix="dtgui-listen") as pool:
        for part in pool.map(for_target, targets):
            results.extend(part)
    return sorted(results, key=lambda r: order.get((r.source, r.target), 0))


def run_doctor_checks(
    clients: Mapping[str, paramiko.SSHClient], machines: Mapping[str, Machine], port: int, *,
    timeout: float = CONNECT_TIMEOUT, on_progress: Callable[[str], None] | None = None,
) -> tuple[list[PortProbe], list[ReachProbe]]:
    """Free-port checks on every machine (in parallel), then reachability between every pair
    towards the machines where the port is free."""
    names = list(clients)
    if not names:
        return [], []
    with ThreadPoolExecutor(min(16, len(names)), thread_name_prefix="dtgui-port") as pool:
        ports = list(pool.map(
            lambda n: check_port_free(clients[n], n, port, python=machines[n].interpreter),
            names))
    if on_progress is not None:
        on_progress(f"Checked port {port} on {len(names)} machine(s).")
    free = [p.machine for p in ports if p.free]
    reach = check_reachability(clients, machines, port, free, timeout=timeout,
                               on_progress=on_progress)
    busy = {p.machine: p for p in ports if not p.free}
    for b, p in busy.items():
        why = (f"port {port} is in use on {b}" if p.free is False
               else f"port {port} could not be checked on {b}")
        for a in names:
            if a != b:
                reach.append(ReachProbe(a, b, _connect_address(machines[b].host), port,
                                        "untested", why))
    order = {n: i for i, n in enumerate(names)}
    reach.sort(key=lambda r: (order[r.source], order[r.target]))
    return ports, reach
