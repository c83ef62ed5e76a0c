"""Real network faults on the SSH test hosts: a port another program holds, a firewalled port,
a slow link between two hosts.

A firewall needs the hosts' own network namespaces (tests/sshhosts.py's netns mode) and
nftables (`nft`, Debian package nftables); `firewall_unavailable()` says why not otherwise.
Rules live in a table of their own inside the host's namespace and are deleted afterwards.

A slow link (`throttled`) is traffic control on the host's eth0 (`tc`, Debian package
iproute2): an HTB class at the rate for packets to the peer, the rest unlimited; a delay needs
netem (`sch_netem`), which some kernels lack (this one was built without it, and without
modules): then the link is slowed by its rate only and `throttled` yields False.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import sshhosts


def _unavailable(host: sshhosts.Host, what: str, tool: str, missing: str) -> str:
    """Why `host` cannot have its own `what` (`tool` runs in its network namespace), or ""."""
    if not host.netns:
        return f"the test hosts share one network stack (loopback mode): no per-host {what}"
    if not shutil.which(tool):
        return missing
    return ""


def firewall_unavailable(host: sshhosts.Host) -> str:
    return _unavailable(host, "firewall", "nft",
                        "nftables is not installed (apt-get install nftables)")


def shaping_unavailable(host: sshhosts.Host) -> str:
    return _unavailable(host, "link", "tc", "tc is not installed (apt-get install iproute2)")


def _in_host(host: sshhosts.Host, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", host.netns, *argv] if host.netns else list(argv)


@contextlib.contextmanager
def firewalled(host: sshhosts.Host, port: int, table: str = "dtgui_test") -> Iterator[None]:
    """Incoming TCP to `port` on `host` is dropped (no answer at all), as a firewall does."""
    rules = (f"table inet {table} {{\n chain input {{\n  type filter hook input priority 0;\n"
             f"  tcp dport {port} drop\n }}\n}}\n")
    subprocess.run(_in_host(host, "nft", "-f", "-"), input=rules, text=True, check=True,
                   capture_output=True, timeout=10)
    try:
        yield
    finally:
        subprocess.run(_in_host(host, "nft", "delete", "table", "inet", table),
                       capture_output=True, timeout=10)


@contextlib.contextmanager
def held(host: sshhosts.Host, port: int) -> Iterator[subprocess.Popen[str]]:
    """Another program listens on host's address and `port` (so the port is not free)."""
    code = ("import socket, sys, time\n"
            "s = socket.socket()\n"
            f"s.bind(({host.address!r}, {port}))\n"
            "s.listen()\n"
            "print('ready', flush=True)\n"
            "time.sleep(600)\n")
    proc = subprocess.Popen(_in_host(host, sys.executable, "-c", code), stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.kill()
        proc.wait(5)


def leftover_listeners(port: int, user: str = sshhosts.TEST_USER, wait: float = 5.0) -> list[str]:
    """Live processes of `user` whose command line mentions `port` (the doctor's listeners
    and connection tests), after waiting up to `wait` seconds for them to end."""
    deadline = time.monotonic() + wait
    while True:
        found = []
        for proc in psutil.process_iter(["username", "cmdline", "status"]):
            info = proc.info
            if info["username"] == user and info["status"] != psutil.STATUS_ZOMBIE \
                    and str(port) in (info["cmdline"] or []):
                found.append(" ".join(info["cmdline"]))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


@contextlib.contextmanager
def throttled(host: sshhosts.Host, rates: dict[str, float], delay_ms: float = 0.0,
              device: str = "eth0") -> Iterator[bool]:
    """Packets from `host` to each address of `rates` leave at its rate in Mbit/s (after
    `delay_ms`, when the kernel has netem; yields whether the delay applies). Throttle both
    hosts of a link for both directions."""
    def tc(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(_in_host(host, "tc", *argv), check=True, capture_output=True,
                              text=True, timeout=10)

    tc("qdisc", "add", "dev", device, "root", "handle", "1:", "htb", "default", "10")
    try:
        tc("class", "add", "dev", device, "parent", "1:", "classid", "1:10", "htb",
           "rate", "10gbit")
        delayed = False
        for n, (peer, mbit) in enumerate(rates.items(), start=20):
            tc("class", "add", "dev", device, "parent", "1:", "classid", f"1:{n}", "htb",
               "rate", f"{mbit:g}mbit", "ceil", f"{mbit:g}mbit")
            if delay_ms:
                with contextlib.suppress(subprocess.CalledProcessError):
                    tc("qdisc", "add", "dev", device, "parent", f"1:{n}", "handle", f"{n}:",
                       "netem", "delay", f"{delay_ms:g}ms")
                    delayed = True
            tc("filter", "add", "dev", device, "parent", "1:", "protocol", "ip", "prio", "1",
               "u32", "match", "ip", "dst", f"{peer}/32", "flowid", f"1:{n}")
        yield delayed
    finally:
        subprocess.run(_in_host(host, "tc", "qdisc", "del", "dev", device, "root"),
                       capture_output=True, timeout=10)
