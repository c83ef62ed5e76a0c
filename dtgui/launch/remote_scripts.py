"""The fixed shell and Python snippets run on remote machines, and their parsers.

Each script is constant text sent on stdin to `sh -s -- ARGS...` (or `python -c CODE ARGS`);
every value (directories, task names, pids, offsets, interpreter paths) is an argument, quoted
by shlex on the command line and used as "$1"... inside: nothing is ever interpolated into
code. Output is line-framed text; file contents come framed by their byte length.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

# START DIR PYTHON WRAPPER STEM...: unpack the bundle (when copied as .bundle.tar.gz), start
# each task detached, print "@@pid STEM PGID".
START_SCRIPT = r"""
cd "$1" || { echo "@@error cannot enter $1"; exit 3; }
PYTHON=$2
export PYTHON
wrapper=$3
shift 3
if [ -f .bundle.tar.gz ]; then
  tar -xzf .bundle.tar.gz || { echo "@@error cannot unpack the bundle in $PWD"; exit 3; }
  rm -f .bundle.tar.gz
fi
mkdir -p output/logs output/pids || { echo "@@error cannot write in $PWD/output"; exit 3; }
command -v setsid >/dev/null 2>&1 || { echo "@@error setsid is not installed"; exit 3; }
for t in "$@"; do
  rm -f "output/pids/$t.exit" "output/pids/$t.pid"
  setsid nohup sh -c "$wrapper" dtgui-task "$t" >> "output/logs/$t.log" 2>&1 < /dev/null &
  echo "@@bgpid $t $!"
done
for t in "$@"; do
  n=0
  while [ ! -s "output/pids/$t.pid" ] && [ "$n" -lt 250 ]; do sleep 0.02; n=$((n + 1)); done
  [ -s "output/pids/$t.pid" ] && echo "@@pid $t $(cat "output/pids/$t.pid")"
done
"""

# POLL DIR MAXBYTES [STEM PGID EVOFF LOGOFF]...: liveness first, then exit codes and data.
POLL_SCRIPT = r"""
cd "$1" || { echo "@@error cannot enter $1"; exit 3; }
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
  '{ sub(/^.*\) /, ""); if (index(want, " " $3 " ") > 0) print $3, $1 }'
emit() {
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
}
while [ $# -ge 4 ]; do
  code=-
  [ -s "output/pids/$1.exit" ] && code=$(cat "output/pids/$1.exit")
  echo "@@exit $1 $code"
  emit "$1" ev "output/events-$1.jsonl" "$3"
  emit "$1" log "output/logs/$1.log" "$4"
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

# Shared by PORTS_CODE and CHECK_CODE: which `wanted` ports are taken (a bind test), and
# `count` free ones (bound together, so they differ).
_PORTS_FUNCTION = r"""
import socket
def check_ports(count, wanted):
    busy, held = [], []
    for port in wanted:
        s = socket.socket()
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            busy.append(port)
        finally:
            s.close()
    for _ in range(count):
        s = socket.socket()
        s.bind(("0.0.0.0", 0))
        held.append(s)
    return busy, [s.getsockname()[1] for s in held]
"""

# python -c PORTS_CODE COUNT PORT...: which given ports are taken, and COUNT free ones.
PORTS_CODE = _PORTS_FUNCTION + r"""
import sys
busy, free = check_ports(int(sys.argv[1]), [int(p) for p in sys.argv[2:]])
print("BUSY", *busy)
print("FREE", *free)
"""

# python -c CHECK_CODE fast|full [DIR COUNT PORT... [mods=M,N]]: the interpreter, the packages
# the worker needs (and a user's script may: keras, tf-keras, tensorboard), (full) whether
# TensorFlow imports; with DIR (relative to the home directory): make it; COUNT free ports
# chosen and PORT... tested with a bind; mods=: which modules cannot be found; isdir=PATH:
# whether that folder exists. One JSON line.
CHECK_CODE = _PORTS_FUNCTION + r"""
import json, os, platform, shutil, sys
out = {"python": platform.python_version(), "executable": sys.executable, "packages": {},
       "tools": {t: bool(shutil.which(t)) for t in ("setsid", "nohup", "awk", "tail", "tar")},
       "home": os.path.expanduser("~")}
try:
    import importlib.metadata as md
    for name in ("tensorflow", "tensorflow-cpu", "numpy", "psutil", "keras", "tf-keras",
                 "tensorboard"):
        try:
            out["packages"][name] = md.version(name)
        except md.PackageNotFoundError:
            out["packages"][name] = ""
except Exception as exc:
    out["error"] = repr(exc)
if len(sys.argv) > 3:
    if sys.argv[2]:
        path = os.path.join(out["home"], sys.argv[2])
        try:
            os.makedirs(path, exist_ok=True)
            out["dir"] = path
        except OSError as exc:
            out["dir_error"] = str(exc)
    out["busy_ports"], out["free_ports"] = check_ports(
        int(sys.argv[3]), [int(p) for p in sys.argv[4:] if p.isdigit()])
# mods=a,b: which of these top-level modules a user's script imports cannot be found here
for arg in sys.argv[2:]:
    if arg.startswith("mods="):
        import importlib.util
        missing = []
        for name in filter(None, arg[5:].split(",")):
            try:
                if importlib.util.find_spec(name) is None:
                    missing.append(name)
            except Exception:
                missing.append(name)
        out["missing_modules"] = missing
    elif arg.startswith("isdir="):  # the data a script expects on every machine
        out["isdir"] = os.path.isdir(os.path.expanduser(arg[6:]))
if sys.argv[1:2] == ["full"]:
    try:
        import tensorflow as tf
        out["tf_import"] = tf.__version__
    except BaseException as exc:
        out["tf_import_error"] = (type(exc).__name__ + ": " + str(exc)).splitlines()[0][:300]
print("DTGUICHECK " + json.dumps(out))
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


def parse_ports(out: str) -> tuple[list[int], list[int]]:
    """(busy, free) from PORTS_CODE's output."""
    busy: list[int] = []
    free: list[int] = []
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == "BUSY":
            busy = [int(p) for p in parts[1:]]
        elif parts and parts[0] == "FREE":
            free = [int(p) for p in parts[1:]]
    return busy, free


def parse_check(out: str) -> dict | None:
    for line in out.splitlines():
        if line.startswith("DTGUICHECK "):
            try:
                data = json.loads(line[len("DTGUICHECK "):])
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None
