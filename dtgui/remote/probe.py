"""What a remote machine has: OS, CPU cores, RAM, Python, TensorFlow, GPUs (nvidia-smi), CUDA.

One fixed shell script runs remotely through `sh -s -- PYTHON` (the script on stdin; the
machine's registered interpreter is its one argument, quoted, never part of the script). It
prints sections headed `@@<name>`, which `parse_probe_output` reads; anything missing or odd
gives an empty field and a warning, never an exception. TensorFlow is imported in its own
process of that interpreter under `timeout 60`: a TensorFlow in a venv or conda env is found
when the machine's Python field points there. nvidia-smi is asked for the compute capability
too; drivers that do not know that field are asked again without it.
"""

from __future__ import annotations

import re

import paramiko

from dtgui.core.hardware import GpuInfo
from dtgui.core.machines import RemoteFacts
from dtgui.remote.commands import run_script

TF_TIMEOUT = 60
GPU_FIELDS = "name,memory.total,memory.used,utilization.gpu,driver_version"
# One print per line, so that the shell can keep these lines apart from TensorFlow's warnings.
TF_CODE = ("import tensorflow as tf; print('TFVERSION', tf.__version__); "
           "print('TFCUDA', int(tf.test.is_built_with_cuda())); "
           "[print('TFGPU', d.name) for d in tf.config.list_physical_devices('GPU')]")

PROBE_SCRIPT = r"""
export LC_ALL=C TF_CPP_MIN_LOG_LEVEL=3
t() { if command -v timeout >/dev/null 2>&1; then timeout "$@"; else shift; "$@"; fi; }
echo @@hostname; hostname 2>/dev/null || uname -n
echo @@uname; uname -s; uname -r; uname -m
echo @@os_release; if [ -r /etc/os-release ]; then . /etc/os-release; echo "$PRETTY_NAME"; \
  else sw_vers -productName 2>/dev/null && sw_vers -productVersion 2>/dev/null; fi
echo @@nproc; nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || sysctl -n hw.ncpu
echo @@cpu; grep -m1 -i -E '^(model name|hardware|cpu model)' /proc/cpuinfo 2>/dev/null \
  | cut -d: -f2- || sysctl -n machdep.cpu.brand_string 2>/dev/null
echo @@mem; grep -m1 '^MemTotal:' /proc/meminfo 2>/dev/null || \
  echo "bytes $(sysctl -n hw.memsize 2>/dev/null)"
echo @@python; py=$(command -v -- "${1:-python3}" 2>/dev/null); echo "$py"
if [ -n "$py" ]; then "$py" -c 'import platform; print(platform.python_version())' 2>&1; fi
echo @@tf
if [ -n "$py" ]; then
  out=$(t __TF_TIMEOUT__ "$py" -c "__TF_CODE__" 2>&1)
  echo "rc=$?"; printf '%s\n' "$out" | grep '^TF[A-Z]* '
  printf '%s\n' "$out" | grep -v '^TF[A-Z]* ' | tail -n 5
fi
echo @@gpus
if command -v nvidia-smi >/dev/null 2>&1; then
  out=$(t 20 nvidia-smi --query-gpu=__GPU_FIELDS__,compute_cap --format=csv,noheader,nounits 2>&1)
  rc=$?
  if [ "$rc" = 0 ]; then echo "query=compute_cap"; else
    out=$(t 20 nvidia-smi --query-gpu=__GPU_FIELDS__ --format=csv,noheader,nounits 2>&1); rc=$?
  fi
  printf '%s\n' "$out"; echo "rc=$rc"
  echo @@smi; t 20 nvidia-smi 2>/dev/null | head -n 6
else echo "rc=notfound"; fi
echo @@end
""".replace("__TF_TIMEOUT__", str(TF_TIMEOUT)).replace("__GPU_FIELDS__", GPU_FIELDS).replace(
    "__TF_CODE__", TF_CODE)


def probe(client: paramiko.SSHClient, python: str = "python3",
          timeout: float = TF_TIMEOUT + 45.0) -> RemoteFacts:
    """Run the probe script on a connected machine (blocks; call off the UI thread).

    `python`: the machine's interpreter (`Machine.interpreter`), a path or a command name.
    """
    python = python.strip() or "python3"
    code, out, err = run_script(client, PROBE_SCRIPT, [python], timeout=timeout)
    facts = parse_probe_output(out, python)
    if code != 0 or "@@end" not in out:
        facts.warnings.append(
            f"The probe stopped early (exit code {code}): {err.strip()[-300:] or 'no message'}"
        )
    return facts


def _sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("@@"):
            current = sections.setdefault(line[2:].strip(), [])
        elif current is not None:
            current.append(line.rstrip())
    return sections


def _first(lines: list[str]) -> str:
    return next((line.strip() for line in lines if line.strip()), "")


def _int(text: str) -> int:
    m = re.search(r"\d+", text)
    return int(m.group()) if m else 0


def _float(text: str) -> float:
    try:
        return float(text.strip())
    except ValueError:  # "[N/A]", "[Not Supported]"
        return 0.0


def parse_gpu_csv(lines: list[str], with_compute_cap: bool = False) -> list[GpuInfo]:
    """Rows of `nvidia-smi --query-gpu=name,memory.total,memory.used,utilization.gpu,
    driver_version[,compute_cap] --format=csv,noheader,nounits` (MiB, percent) as GpuInfo."""
    gpus: list[GpuInfo] = []
    tail = 5 if with_compute_cap else 4
    for line in lines:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < tail + 1 or not line.strip():
            continue
        # The name is the only field that could hold a comma: take the others from the right.
        name = ", ".join(parts[:-tail])
        total, used, util, driver = parts[-tail:][:4]
        cc = parts[-1] if with_compute_cap else ""
        if not re.fullmatch(r"\d+(\.\d+)?", total):
            continue
        gpus.append(
            GpuInfo(
                index=len(gpus), name=name, mem_total=int(_float(total) * 1024 * 1024),
                mem_used=int(_float(used) * 1024 * 1024), util=_float(util), driver=driver,
                compute_capability=cc if re.fullmatch(r"\d+\.\d+", cc) else "",
            )
        )
    return gpus


def parse_probe_output(text: str, python: str = "python3") -> RemoteFacts:
    """The probe script's output; `python` is the interpreter it was asked to use."""
    s = _sections(text)
    facts = RemoteFacts(hostname=_first(s.get("hostname", [])), python_command=python)
    uname = [line.strip() for line in s.get("uname", []) if line.strip()]
    if len(uname) >= 3:
        facts.kernel, facts.arch = f"{uname[0]} {uname[1]}", uname[2]
    facts.os_name = " ".join(x.strip() for x in s.get("os_release", []) if x.strip()) or (
        uname[0] if uname else ""
    )
    facts.cpu_cores = _int(_first(s.get("nproc", [])))
    facts.cpu_model = _first(s.get("cpu", []))
    mem = _first(s.get("mem", []))
    if mem.startswith("MemTotal"):
        facts.ram_total = _int(mem) * 1024  # kB
    elif mem.startswith("bytes"):
        facts.ram_total = _int(mem)
    py = [line.strip() for line in s.get("python", []) if line.strip()]
    if py:
        facts.python_path = py[0]
        if len(py) > 1 and re.fullmatch(r"\d+\.\d+\.\d+\S*", py[1]):
            facts.python_version = py[1]
        else:
            facts.warnings.append(f"{py[0]} did not report its version.")
    elif python == "python3":
        facts.warnings.append("No python3 on the machine's PATH.")
    else:
        facts.warnings.append(f"The Python interpreter {python!r} was not found there.")
    _parse_tf(facts, s.get("tf", []))
    _parse_gpus(facts, s.get("gpus", []), s.get("smi", []))
    return facts


def _parse_tf(facts: RemoteFacts, lines: list[str]) -> None:
    if not facts.python_path:
        facts.tf_version, facts.tf_error = "not installed", f"no {facts.python_command}"
        return
    body = [line for line in lines if line.strip()]
    rc = body[0][3:] if body and body[0].startswith("rc=") else ""
    for line in body:
        key, _, value = line.partition(" ")
        if key == "TFVERSION":
            facts.tf_version = value.strip()
        elif key == "TFCUDA":
            facts.tf_built_with_cuda = value.strip() == "1"
        elif key == "TFGPU":
            facts.tf_gpus.append(value.strip())
    if facts.tf_version:
        return
    joined = "\n".join(body)
    if "No module named 'tensorflow'" in joined or "No module named tensorflow" in joined:
        facts.tf_version = "not installed"
    elif rc == "124":
        facts.tf_error = f"importing TensorFlow took longer than {TF_TIMEOUT} s"
    else:
        last = body[-1].strip() if len(body) > 1 else "no output"
        facts.tf_error = f"importing TensorFlow failed (exit {rc or '?'}): {last[-200:]}"


def _parse_gpus(facts: RemoteFacts, lines: list[str], smi: list[str]) -> None:
    with_cc = "query=compute_cap" in lines
    rows = [line for line in lines
            if line.strip() and not line.startswith(("rc=", "query="))]
    rc = next((line[3:] for line in lines if line.startswith("rc=")), "")
    if rc == "notfound":
        facts.gpu_error = "nvidia-smi not found (no NVIDIA driver)"
        return
    m = re.search(r"CUDA Version:\s*([0-9.]+)", "\n".join(smi))
    facts.cuda_version = m.group(1) if m else ""
    facts.gpus = parse_gpu_csv(rows, with_compute_cap=with_cc)
    if facts.gpus:
        facts.driver = facts.gpus[0].driver
    elif rc != "0" or rows:
        facts.gpu_error = f"nvidia-smi failed: {(rows[-1] if rows else 'exit ' + rc)[-200:]}"
