"""A real Slurm on this machine for tests: munged, slurmctld and two slurmd (node1, node2) on
one host, their state, spool, pid and log files under a temporary directory.

`start_cluster(tmp)` returns a `SlurmCluster` (or raises `SlurmUnavailable` saying why it
cannot start here); `cluster.stop()` stops every daemon it started, by the pid it recorded.
`served_cluster()` is the test modules' fixture body: a cluster for the module's length, or
the module skipped with the reason.
Commands reach it through SLURM_CONF (set in os.environ while it runs).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

TEMPLATE = Path(__file__).parent / "fixtures" / "slurm" / "slurm.conf.template"
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
MUNGE_PID = Path("/run/munge/munged.pid")


class SlurmUnavailable(RuntimeError):
    """Slurm's daemons cannot run here; the message says why."""


def _free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    pid_files: list[Path] = field(default_factory=list)
    munged_pid: int = 0  # munged, when this cluster started it
    old_conf: str | None = None

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, timeout: float = 15) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              env=self.env())

    def queue(self) -> list[str]:
        """Job ids in the queue (any state)."""
        return self.run("squeue", "-h", "-o", "%i").stdout.split()

    def drained(self, timeout: float = 15) -> list[str]:
        """The queue once it empties, or as it is after `timeout` seconds. A job whose tasks
        have all ended stays a moment in COMPLETING while slurmd cleans up; on a loaded
        machine that moment can outlast the run's end."""
        deadline = time.monotonic() + timeout
        while (jobs := self.queue()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return jobs

    def log(self, name: str) -> str:
        path = self.root / "log" / name
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):  # no job outlives it
            jobs = self.queue()
            if jobs:
                self.run("scancel", *jobs)
        pids = []
        for path in self.pid_files:  # every daemon at once, then wait for them
            with contextlib.suppress(OSError, ValueError):
                pid = int(path.read_text().split()[0])
                os.kill(pid, signal.SIGTERM)
                pids.append(pid)
        deadline = time.monotonic() + 10
        for pid in pids:
            with contextlib.suppress(OSError):
                while time.monotonic() < deadline:
                    os.kill(pid, 0)
                    time.sleep(0.1)
                os.kill(pid, signal.SIGKILL)
        for pid in _job_steps(self.conf):  # a job's step daemons, should one be left
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if self.munged_pid and not _slurm_daemons():  # another test session may still use it
            with contextlib.suppress(OSError):
                os.kill(self.munged_pid, signal.SIGTERM)
        if self.old_conf is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = self.old_conf


def _slurm_daemons() -> list[int]:
    """Pids of every slurmctld and slurmd running here (any test session's)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if Path(entry.path, "comm").read_text().strip() in ("slurmctld", "slurmd"):
                    found.append(int(entry.name))
    return found


def _job_steps(conf: Path) -> list[int]:
    """Pids of the slurmstepd processes of the cluster whose configuration is `conf`."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if Path(entry.path, "comm").read_text().strip() == "slurmstepd" and \
                        f"SLURM_CONF={conf}".encode() in \
                        Path(entry.path, "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
    return found


def _start_munge() -> int:
    """munged's pid when started here, 0 when one answers already."""
    if MUNGE_SOCKET.exists() and subprocess.run(["munge", "-n"], capture_output=True).returncode == 0:
        return 0
    Path("/run/munge").mkdir(parents=True, exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    done = subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SlurmUnavailable(f"munged does not start: {done.stderr.strip()}")
    for _ in range(50):
        if MUNGE_PID.exists():
            with contextlib.suppress(ValueError):
                return int(MUNGE_PID.read_text().split()[0])
        time.sleep(0.1)
    return 0


def start_cluster(root: Path, timeout: float = 30.0) -> SlurmCluster:
    for program in ("slurmctld", "slurmd", "munged", "sinfo", "sbatch"):
        if shutil.which(program) is None and not Path(f"/usr/sbin/{program}").exists():
            raise SlurmUnavailable(f"{program} is not installed (apt-get install slurmctld "
                                   "slurmd slurm-client munge)")
    if os.geteuid() != 0:
        raise SlurmUnavailable("the test Slurm runs its daemons as root (SlurmUser=root)")
    for sub in ("state", "spool/node1", "spool/node2", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    ctld, node1, node2 = _free_ports(3)
    text = TEMPLATE.read_text()
    for key, value in (("@DIR@", str(root)), ("@HOST@", socket.gethostname()),
                       ("@CTLD_PORT@", str(ctld)), ("@NODE1_PORT@", str(node1)),
                       ("@NODE2_PORT@", str(node2))):
        text = text.replace(key, value)
    conf = root / "slurm.conf"
    conf.write_text(text)
    cluster = SlurmCluster(root, conf, old_conf=os.environ.get("SLURM_CONF"))
    try:
        cluster.munged_pid = _start_munge()
        os.environ["SLURM_CONF"] = str(conf)
        for argv, pid_file in ((["/usr/sbin/slurmctld", "-i"], root / "slurmctld.pid"),
                               (["/usr/sbin/slurmd", "-N", "node1"], root / "slurmd-node1.pid"),
                               (["/usr/sbin/slurmd", "-N", "node2"], root / "slurmd-node2.pid")):
            done = subprocess.run(argv, capture_output=True, text=True, env=cluster.env())
            cluster.pid_files.append(pid_file)
            if done.returncode != 0:
                raise SlurmUnavailable(f"{argv[0]} does not start: {done.stderr.strip()}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rows = [line.split() for line in
                    cluster.run("sinfo", "-h", "-N", "-o", "%N %t").stdout.splitlines()]
            # a row a node and partition: both nodes idle (in every partition)
            idle = {row[0] for row in rows if row[1:] == ["idle"]}
            if idle - {row[0] for row in rows if row and row[1:] != ["idle"]} == \
                    {"node1", "node2"}:
                return cluster
            time.sleep(0.5)
        raise SlurmUnavailable("the two test nodes did not become idle within "
                               f"{timeout:g} s: {cluster.log('slurmctld.log')[-2000:]}")
    except BaseException:
        cluster.stop()
        raise


def served_cluster() -> Iterator[SlurmCluster]:
    """A running cluster until the generator is closed (then every daemon stops and its files
    go); skips the calling test module when Slurm cannot run here. Its files live outside
    pytest's private temporary directory: the SSH test account's jobs run scripts from the
    nodes' spool directories there."""
    root = Path(tempfile.mkdtemp(prefix="dtgui-slurm-"))
    root.chmod(0o755)
    try:
        cluster = start_cluster(root)
    except SlurmUnavailable as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"Slurm cannot run here: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
