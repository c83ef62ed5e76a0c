"""The fixed shell scripts that start, watch and signal a run's tasks on a remote machine,
and their parsers. (What a machine has, and its ports, is asked by the machine probe:
`dtgui.remote.probe`.) These stay shell: the poll runs every few seconds for the whole run,
and as sh it costs about a fifth of starting Python each time (24 ms against 120 ms on the
2-core test machine under load); starting and signalling are setsid, nohup and kill. tests/test_placement.py runs them through `sh -s`.

Each script is constant text sent on stdin to `sh -s -- ARGS...`; every value (directories,
task names, pids, offsets, interpreter paths) is an argument, quoted by shlex on the command
line and used as "$1"... inside: nothing is ever interpolated into code. Output is
line-framed text; file contents come framed by their byte length. Every path in them is the
bundle's layout (`dtgui.worker.layout`), spelled with the script's variables.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from dtgui.core.runs.liveness import GroupFacts, Member
from dtgui.worker.layout import (
    BUNDLE_ARCHIVE,
    TASK_DIRS,
    WRAPPER_NAME,
    events_file,
    exit_file,
    log_file,
    pid_file,
)

_DIRS = " ".join(TASK_DIRS)

# unpack the bundle when it was copied as BUNDLE_ARCHIVE; make the tasks' directories
UNPACK = f"""
if [ -f {BUNDLE_ARCHIVE} ]; then
  tar -xzf {BUNDLE_ARCHIVE} || {{ echo "@@error cannot unpack the bundle in $PWD"; exit 3; }}
  rm -f {BUNDLE_ARCHIVE}
fi
mkdir -p {_DIRS} || {{ echo "@@error cannot write in $PWD/output"; exit 3; }}
"""

# UNPACK_SCRIPT DIR: unpack the bundle copied as BUNDLE_ARCHIVE, make the tasks' directories.
UNPACK_SCRIPT = """
cd "$1" || { echo "@@error cannot enter $1"; exit 3; }
""" + UNPACK

# START DIR PYTHON WRAPPER STEM...: unpack the bundle (when copied as an archive), start each
# task detached in WRAPPER, print "@@pid STEM PGID".
START_SCRIPT = r"""
cd "$1" || { echo "@@error cannot enter $1"; exit 3; }
PYTHON=$2
export PYTHON
wrapper=$3
shift 3
""" + UNPACK + f"""
command -v setsid >/dev/null 2>&1 || {{ echo "@@error setsid is not installed"; exit 3; }}
for t in "$@"; do
  rm -f "{exit_file("$t")}" "{pid_file("$t")}"
  setsid nohup sh -c "$wrapper" {WRAPPER_NAME} "$t" >> "{log_file("$t")}" 2>&1 < /dev/null &
  echo "@@bgpid $t $!"
done
for t in "$@"; do
  n=0
  while [ ! -s "{pid_file("$t")}" ] && [ "$n" -lt 250 ]; do sleep 0.02; n=$((n + 1)); done
  [ -s "{pid_file("$t")}" ] && echo "@@pid $t $(cat "{pid_file("$t")}")"
done
"""

# POLL DIR MAXBYTES [STEM PGID EVOFF LOGOFF]...: liveness first, then exit codes and data.
POLL_SCRIPT = rf"""
cd "$1" || {{ echo "@@error cannot enter $1"; exit 3; }}
max=$2
shift 2
echo "@@now $(date +%s.%N 2>/dev/null)"
want=" "
i=0
for a in "$@"; do
  [ $((i % 4)) -eq 1 ] && want="$want$a "
  i=$((i + 1))
done
echo "@@ps"
cat /proc/[0-9]*/stat 2>/dev/null | awk -v want="$want" \
  '{{ sub(/^.*\) /, ""); if (index(want, " " $3 " ") > 0) print $3, $1 }}'
emit() {{
  if [ -f "$3" ]; then size=$(( $(wc -c < "$3") )); else size=0; fi
  n=$((size - $4))
  [ "$n" -gt "$max" ] && n=$max
  if [ "$n" -gt 0 ]; then
    echo "@@data $1 $2 $4 $n"
    tail -c +$(($4 + 1)) "$3" | head -c "$n"
    echo
  elif [ "$n" -lt 0 ]; then
    echo "@@trunc $1 $2 $size"
  fi
}}
while [ $# -ge 4 ]; do
  code=-
  [ -s "{exit_file("$1")}" ] && code=$(cat "{exit_file("$1")}")
  echo "@@exit $1 $code"
  emit "$1" ev "{events_file("$1")}" "$3"
  emit "$1" log "{log_file("$1")}" "$4"
  shift 4
done
echo "@@end"
"""

# SIGNAL SIG PGID...: signal each process group; CONT as well, so stopped tasks act on it.
# sh -s SIGNALS PGID...: send each signal of the comma-separated SIGNALS (TERM,CONT), in
# order, to each process group.
SIGNAL_SCRIPT = r"""
sigs=$1
shift
for p in "$@"; do
  for sig in $(printf '%s' "$sigs" | tr ',' ' '); do
    kill -s "$sig" -- "-$p" 2>/dev/null
  done
done
exit 0
"""

# GROUPS PGID...: the boot id, then "PGID PID STATE START" for each process of the groups
# (what `dtgui.core.runs.liveness.GroupFacts` holds; the poll's /proc read, with start times).
GROUPS_SCRIPT = r"""
echo "@@boot $(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
want=" $* "
cat /proc/[0-9]*/stat 2>/dev/null | awk -v want="$want" \
  '{ pid = $1; sub(/^.*\) /, ""); if (index(want, " " $3 " ") > 0) print $3, pid, $1, $20 }'
echo "@@end"
"""


@dataclass
class PollOutput:
    now: float | None = None
    states: dict[int, list[str]] = field(default_factory=dict)  # pgid -> process states
    exits: dict[str, int | None] = field(default_factory=dict)  # stem -> exit code
    data: dict[tuple[str, str], tuple[int, bytes]] = field(default_factory=dict)
    truncated: dict[tuple[str, str], int] = field(default_factory=dict)
    complete: bool = False
    error: str = ""


_HEADER = re.compile(rb"@@(\w+)(?: (.*))?")


def parse_poll(out: bytes) -> PollOutput:
    """Parse POLL_SCRIPT's output (bytes: file contents are framed by their length)."""
    result = PollOutput()
    pos, section = 0, ""
    while pos < len(out):
        end = out.find(b"\n", pos)
        end = len(out) if end < 0 else end
        line = out[pos:end]
        pos = end + 1
        m = _HEADER.fullmatch(line)
        if m is None:
            if section == "ps":
                parts = line.split()
                if len(parts) == 2 and parts[0].isdigit():
                    result.states.setdefault(int(parts[0]), []).append(parts[1].decode())
            continue
        kind, rest = m.group(1).decode(), (m.group(2) or b"").decode("utf-8", "replace")
        section = kind
        args = rest.split()
        if kind == "now":
            try:
                result.now = float(rest)
            except ValueError:
                result.now = None
        elif kind == "exit" and len(args) == 2:
            code = args[1]
            result.exits[args[0]] = int(code) if code.lstrip("-").isdigit() else None
        elif kind == "data" and len(args) == 4:
            stem, which, offset, size = args[0], args[1], int(args[2]), int(args[3])
            result.data[(stem, which)] = (offset, out[pos: pos + size])
            pos += size + 1  # the data, then the newline the script adds
        elif kind == "trunc" and len(args) == 3:
            result.truncated[(args[0], args[1])] = int(args[2])
        elif kind == "error":
            result.error = rest
        elif kind == "end":
            result.complete = True
    return result


def parse_groups(out: str, pgids: Sequence[int]) -> GroupFacts:
    """GROUPS_SCRIPT's output as `GroupFacts`; ValueError when it did not run to its end."""
    facts = GroupFacts(members={p: [] for p in pgids})
    ended = False
    for line in out.splitlines():
        parts = line.split()
        if parts[:1] == ["@@boot"]:
            facts.boot = parts[1] if len(parts) > 1 else ""
        elif parts == ["@@end"]:
            ended = True
        elif len(parts) == 4 and parts[0].isdigit() and int(parts[0]) in facts.members and \
                parts[1].isdigit() and parts[3].isdigit():
            facts.members[int(parts[0])].append(Member(int(parts[1]), parts[2], int(parts[3])))
    if not ended:
        raise ValueError("the look at the processes did not finish")
    return facts


def parse_pids(out: str) -> dict[str, int]:
    """STEM -> process group: the pid the task's wrapper wrote (its session id), else the
    pid of the background job (the same process: setsid does not fork there)."""
    pids: dict[str, int] = {}
    backgrounded: dict[str, int] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2].isdigit():
            if parts[0] == "@@pid":
                pids[parts[1]] = int(parts[2])
            elif parts[0] == "@@bgpid":
                backgrounded[parts[1]] = int(parts[2])
    return {**backgrounded, **pids}
