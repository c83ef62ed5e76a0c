"""Whether a recorded task's processes are still there, from a machine's /proc: pure rules
over what the host layer read (`dtgui.launch.exec.host`: this machine's /proc, or the same
read over SSH by a fixed script).

A task runs as a process group whose leader is its wrapper; the record keeps the group's id
and its identity when it started: the machine's boot id and the leader's start time (clock
ticks since boot, field 22 of /proc/PID/stat). After a reboot, or once the id was given to
another process, the id alone would lie. A group counts as the task's while the machine has
not rebooted and either its leader has the recorded start time, or (the wrapper gone, its
children left) no leader is there and its members started no earlier than the task. A new
group under a reused id has a leader started later, so it does not count; when in doubt the
task counts as alive (nothing is rewritten while a task may still be alive).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Member:
    """One process of a group: its pid, state letter (R, S, Z, ...) and start time."""

    pid: int
    state: str
    start: int


@dataclass
class GroupFacts:
    """What one look at a machine's processes found for some process groups."""

    boot: str = ""  # /proc/sys/kernel/random/boot_id ("" = not read)
    members: dict[int, list[Member]] = field(default_factory=dict)  # pgid -> its processes

    def identity(self, pgid: int) -> str:
        """The group's identity to record ("" = its leader is not there): boot id and the
        leader's start time."""
        leader = next((m for m in self.members.get(pgid, []) if m.pid == pgid), None)
        return f"{self.boot}/{leader.start}" if leader is not None and self.boot else ""

    def left(self, pgid: int, identity: str) -> bool:
        """Whether a live process of the task recorded as (`pgid`, `identity`) is left (an
        identity of "": a record written before identities were kept, the id alone)."""
        live = [m for m in self.members.get(pgid, []) if m.state not in ("Z", "X")]
        if not live:
            return False
        boot, _, start_text = identity.partition("/")
        if not identity or not self.boot or not start_text.isdigit():
            return True  # nothing to tell it by: alive
        if boot != self.boot:
            return False  # the machine rebooted: none of its processes is left
        start = int(start_text)
        leader = next((m for m in live if m.pid == pgid), None)
        if leader is not None:
            return leader.start == start
        return any(m.start >= start for m in live)


def parse_stat(line: bytes) -> tuple[int, str, int, int] | None:
    """(pid, state, pgid, start time) of one /proc/PID/stat line (None: not one)."""
    head, sep, rest = line.rpartition(b")")
    if not sep:
        return None
    pid_text = head.split(b" (", 1)[0].strip()
    fields = rest.split()
    if len(fields) < 20 or not pid_text.isdigit():
        return None
    try:
        return int(pid_text), fields[0].decode(), int(fields[2]), int(fields[19])
    except ValueError:
        return None
