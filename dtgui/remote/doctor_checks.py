"""The doctor's measurements, taken on the machines themselves over SSH.

* `check_port_free`: can the port be bound on all addresses of a machine (as TensorFlow's
  gRPC server binds it)?
* `check_reachability`: for every ordered pair (A, B), a short-lived listener runs on B and
  A opens a TCP connection to B's address and port. The listener answers with a random token,
  so a connection that reached something else (a proxy, another program) is told apart.
* `measure_links`: for every pair that reached each other, the same listener on B and from A
  round trips and a timed transfer over that port (`dtgui.core.measure.network_pairs`); one pair at a
  time, so that no two transfers share a link while they are timed.

Both run the machine probe (`dtgui.worker.machine_probe`: its port check, `listen` and
`connect`) with the machine's own interpreter (its Python field, default python3), its source
on stdin; ports, addresses and tokens are arguments, quoted, never interpolated. Everything
is bounded in time: the listener exits by itself after its lifetime or once every source
connected, and is killed by its pid if it is still there when its sources are done. Checks
run in parallel threads (paramiko channels of one connection may be used from several threads).
"""

from __future__ import annotations

import contextlib
import ipaddress
import secrets
import shlex
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import paramiko

from dtgui.core.machines.doctor import REACH_OUTCOMES, PortTest, ReachTest
from dtgui.core.machines.registry import Machine
from dtgui.core.measure.network_pairs import TRANSFER_BYTES, TRANSFER_LIMIT, LinkTest
from dtgui.core.time_limits import start_limit
from dtgui.remote.commands import NOT_FOUND, SshRunner, run
from dtgui.remote.hostkeys import ConnectError
from dtgui.remote.parallel import each_value
from dtgui.remote.probe import ask, probe_source

CONNECT_TIMEOUT = 3.0
LISTENER_MARGIN = 20.0
# starting the listener's Python over SSH: the machine's time, longer on a loaded machine
LISTENER_START = start_limit(15.0)


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
                    timeout: float = 20.0, *, python: str = "python3") -> PortTest:
    """Whether TensorFlow could bind `port` on that machine (the machine probe's port check),
    and when not, which program holds it."""
    port = int(port)
    try:
        answer = ask(SshRunner(client), python, ["facts", "--test-port", str(port), "--who"],
                     timeout)
    except ConnectError as exc:
        return PortTest(name, port, None, str(exc))
    if answer.python_missing:
        return PortTest(name, port, None, f"there is no {python} on {name}")
    if answer.data is None:
        return PortTest(name, port, None, answer.detail)
    checked = answer.data.get("ports") or {}
    if str(port) in checked.get("busy", {}):
        return PortTest(name, port, False, str(checked["busy"][str(port)]))
    if str(port) in checked.get("errors", {}):
        return PortTest(name, port, None, f"binding it failed: {checked['errors'][str(port)]}")
    if "ports" not in answer.data:
        return PortTest(name, port, None, str(answer.data.get("error") or "no answer"))
    return PortTest(name, port, True)


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
        args = [python, "-", "listen", bind, str(port), token, str(expect), f"{lifetime:g}"]
        self.chan = transport.open_session(timeout=10)
        try:
            self.chan.exec_command(shlex.join(args))
            try:
                self.chan.sendall(probe_source())
                self.chan.shutdown_write()
            except OSError:
                # the listener ended before reading the probe (no Python there): wait_ready
                # reads why from its exit
                if not transport.is_active():
                    raise
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
            if self.chan.eof_received and not self._buf and not self.chan.recv_ready():
                if self.chan.exit_status_ready() and self.chan.recv_exit_status() == NOT_FOUND:
                    return False, f"there is no {self.python} there"
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


def _dial(client: paramiko.SSHClient, address: str, port: int, token: str, timeout: float,
          python: str, send: int = 0) -> dict[str, Any]:
    """The probe's `connect` answer, run on the machine of `client` (`outcome` "untested"
    with the reason when it could not run)."""
    args = ["connect", address, str(int(port)), token, f"{timeout:g}"]
    args += ["--send", str(int(send))] if send else []
    try:
        answer = ask(SshRunner(client), python, args, timeout * (2 if send else 1) + 15)
    except ConnectError as exc:
        return {"outcome": "untested", "detail": str(exc)}
    if answer.python_missing:
        return {"outcome": "untested",
                "detail": f"there is no {python} on the connecting machine"}
    data = answer.data or {}
    if data.get("outcome") in REACH_OUTCOMES:
        return data
    return {"outcome": "untested", "detail": str(data.get("error") or answer.detail)}


def try_connect(client: paramiko.SSHClient, address: str, port: int, token: str,
                timeout: float = CONNECT_TIMEOUT, *,
                python: str = "python3") -> tuple[str, float, str]:
    """(outcome, millis, detail) of a TCP connection opened on the machine of `client`."""
    data = _dial(client, address, port, token, timeout, python)
    return str(data["outcome"]), float(data.get("millis") or 0.0), str(data.get("detail", ""))


def measure_link(clients: Mapping[str, paramiko.SSHClient], machines: Mapping[str, Machine],
                 source: str, target: str, port: int, *, size: int = TRANSFER_BYTES,
                 limit: float = TRANSFER_LIMIT) -> LinkTest:
    """Round trips and a transfer of `size` bytes (at most `limit` s) from `source` to a test
    listener on `target`'s `port`."""
    address, token = _connect_address(machines[target].host), secrets.token_hex(12)
    try:
        listener = _Listener(clients[target], _bind_address(machines[target].host), port, token,
                             1, limit + LISTENER_MARGIN, python=machines[target].interpreter)
    except (ConnectError, paramiko.SSHException, OSError) as exc:
        return LinkTest(source, target, port, error=f"no listener on {target}: {exc}")
    try:
        ready, why = listener.wait_ready(LISTENER_START)
        if not ready:
            return LinkTest(source, target, port, error=f"on {target}, {why}")
        data = _dial(clients[source], address, port, token, limit,
                     machines[source].interpreter, send=size)
    finally:
        listener.stop()
    if data.get("outcome") != "ok":
        return LinkTest(source, target, port, error=str(data.get("detail") or data["outcome"]))
    if "rate" not in data:
        return LinkTest(source, target, port, error=str(data.get("measure_error") or
                                                        "the transfer was not timed"))
    return LinkTest(source, target, port, rtt_ms=float(data.get("rtt_ms") or 0.0),
                    bandwidth=float(data["rate"]), sent=int(data.get("sent") or 0),
                    received=int(data.get("received") or 0), measured_at=time.time())


def measure_links(clients: Mapping[str, paramiko.SSHClient], machines: Mapping[str, Machine],
                  port: int, reach: Sequence[ReachTest] | None = None, *,
                  size: int = TRANSFER_BYTES, limit: float = TRANSFER_LIMIT,
                  on_progress: Callable[[str], None] | None = None) -> list[LinkTest]:
    """Each pair of `clients` both ways (a link can be faster one way than the other: a
    shaped or saturated uplink, a duplex mismatch), among the pairs `reach` found connected
    both ways (every pair without `reach`); one transfer at a time, as two at once would
    share the link."""
    names = list(clients)
    connected = {(r.source, r.target) for r in reach or () if r.outcome == "ok"}
    links = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if reach is not None and not {(a, b), (b, a)} <= connected:
                continue
            for source, target in ((a, b), (b, a)):
                if on_progress is not None:
                    on_progress(f"Measuring the link {source} → {target} ({size / 2**20:.0f} "
                                f"MiB on port {port})…")
                links.append(measure_link(clients, machines, source, target, port, size=size,
                                          limit=limit))
    return links


def check_reachability(
    clients: Mapping[str, paramiko.SSHClient], machines: Mapping[str, Machine], port: int,
    targets: Sequence[str] | None = None, *, timeout: float = CONNECT_TIMEOUT,
    on_progress: Callable[[str], None] | None = None,
) -> list[ReachTest]:
    """Every ordered pair (A -> B) of `clients`, B among `targets` (default: all)."""
    names = list(clients)
    targets = list(targets) if targets is not None else names
    order = {(a, b): i for i, (a, b) in enumerate((a, b) for a in names for b in names if a != b)}
    results: list[ReachTest] = []

    def for_target(b: str) -> list[ReachTest]:
        sources = [a for a in names if a != b]
        address = _connect_address(machines[b].host)
        token = secrets.token_hex(12)
        out: list[ReachTest] = []
        try:
            listener = _Listener(clients[b], _bind_address(machines[b].host), port, token,
                                 len(sources), timeout + LISTENER_MARGIN,
                                 python=machines[b].interpreter)
        except (ConnectError, paramiko.SSHException, OSError) as exc:
            return [ReachTest(a, b, address, port, "untested", f"no listener on {b}: {exc}")
                    for a in sources]
        try:
            ready, why = listener.wait_ready(LISTENER_START)
            if not ready:
                return [ReachTest(a, b, address, port, "untested", f"on {b}, {why}")
                        for a in sources]
            found = each_value(lambda a: try_connect(clients[a], address, port, token, timeout,
                                                     python=machines[a].interpreter),
                               sources, name="dtgui-reach")
            for a, (outcome, ms, detail) in zip(sources, found, strict=True):
                out.append(ReachTest(a, b, address, port, outcome, detail, ms, timeout,
                                     _connect_address(machines[a].host)))
        finally:
            listener.stop()
        if on_progress is not None:
            on_progress(f"Tested the paths to {b}.")
        return out

    if len(names) < 2:
        return []
    for part in each_value(for_target, targets, name="dtgui-listen"):
        results.extend(part)
    return sorted(results, key=lambda r: order.get((r.source, r.target), 0))


def run_doctor_checks(
    clients: Mapping[str, paramiko.SSHClient], machines: Mapping[str, Machine], port: int, *,
    timeout: float = CONNECT_TIMEOUT, on_progress: Callable[[str], None] | None = None,
) -> tuple[list[PortTest], list[ReachTest]]:
    """Free-port checks on every machine (in parallel), then reachability between every pair
    towards the machines where the port is free."""
    names = list(clients)
    if not names:
        return [], []
    ports = each_value(lambda n: check_port_free(clients[n], n, port,
                                                 python=machines[n].interpreter),
                       names, name="dtgui-port")
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
                reach.append(ReachTest(a, b, _connect_address(machines[b].host), port,
                                       "untested", why))
    order = {n: i for i, n in enumerate(names)}
    reach.sort(key=lambda r: (order[r.source], order[r.target]))
    return ports, reach
