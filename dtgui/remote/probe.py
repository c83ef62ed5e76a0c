"""What a machine has, asked by running dtgui's machine probe there with its own Python.

`ask` runs the program `dtgui/worker/machine_probe.py` through a `CommandRunner`: the command
is `PYTHON - ARGS...` with the program's source on stdin, the same on this machine (a
subprocess) and over SSH, so no login shell ever parses code. An interpreter that is not
there exits 127. The pre-launch check, the doctor and the machines panel all ask through here.

`probe` gathers the machines panel's `RemoteFacts` in two answers: the system and GPUs first,
then TensorFlow in a process of its own under a time limit, so that a hanging import loses
nothing else. When the machine's registered interpreter is missing, the system is still asked
of its python3. A machine of a kind of its own (a cluster's login node) also answers its kind's part (its
driver's `probe_facts`). The `read_*` functions turn answers into facts and never raise.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko

from dtgui.core.machines.hardware import GpuInfo, TfView, tf_view
from dtgui.core.machines.registry import RemoteFacts
from dtgui.core.time_limits import start_limit
from dtgui.remote.commands import NOT_FOUND, CommandRunner, CommandTimeout, SshRunner
from dtgui.worker import machine_probe

TF_TIMEOUT = start_limit(60.0)
FACTS_TIMEOUT = start_limit(45.0)
ANSWER_MARGIN = 30.0  # beyond the program's own time limit: starting it, the connection
PROBE_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3"}
NOT_INSTALLED = "TensorFlow is not installed"
# A kind's own part of the probe: asked through the machine's runner, into the facts.
KindProbe = Callable[[CommandRunner, RemoteFacts], None]


@dataclass(frozen=True)
class ProbeAnswer:
    """The program's answer (`data`), or None with its exit code and last words."""

    data: dict[str, Any] | None
    code: int = 0
    detail: str = ""

    @property
    def python_missing(self) -> bool:
        return self.data is None and self.code == NOT_FOUND


@functools.cache
def probe_source() -> bytes:
    return Path(machine_probe.__file__).read_bytes()


def parse_answer(out: str) -> dict[str, Any] | None:
    """The JSON object of the program's `DTGUIPROBE` line (None when there is none)."""
    for line in reversed(out.splitlines()):
        if line.startswith(machine_probe.MARKER):
            try:
                data = json.loads(line[len(machine_probe.MARKER):])
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


def ask(runner: CommandRunner, python: str, args: Sequence[str],
        timeout: float = FACTS_TIMEOUT) -> ProbeAnswer:
    """Run the machine probe with `python` (a path or a command name) and these arguments.
    Raises ConnectError when the connection is lost."""
    try:
        code, out, err = runner.run([python, "-", *args], timeout, stdin=probe_source(),
                                    env=PROBE_ENV)
    except CommandTimeout:
        return ProbeAnswer(None, 124, f"{python} did not answer within {timeout:g} s")
    text = out.decode("utf-8", "replace")
    data = parse_answer(text)
    if data is not None:
        return ProbeAnswer(data, code)
    words = (err.decode("utf-8", "replace") or text).strip().splitlines()
    return ProbeAnswer(None, code, words[-1][:300] if words else f"exit code {code}")


def ask_tensorflow(runner: CommandRunner, python: str, devices: bool = True,
                   timeout: float = TF_TIMEOUT) -> ProbeAnswer:
    """Import TensorFlow in a process of its own, ended after `timeout` s."""
    return ask(runner, python, ["facts", "--tensorflow", "devices" if devices else "import",
                                "--time-limit", f"{timeout:g}"], timeout + ANSWER_MARGIN)


def tensorflow_view(runner: CommandRunner, python: str, timeout: float = TF_TIMEOUT) -> TfView:
    """What TensorFlow can use with this interpreter."""
    return read_tensorflow(ask_tensorflow(runner, python, timeout=timeout), python, timeout)


def probe(machine: paramiko.SSHClient | CommandRunner, python: str = "python3",
          timeout: float = TF_TIMEOUT, *, kind_probe: KindProbe | None = None) -> RemoteFacts:
    """Everything the machines panel shows of a machine (blocks; call off the UI thread).

    `machine`: a connection (or a runner); `python`: its interpreter (`Machine.interpreter`),
    a path or a command name; `timeout`: how long TensorFlow may take to import;
    `kind_probe`: the machine's kind asks its own part there (its driver's `probe_facts`,
    into `facts.kind_facts`: a cluster's login node, what its scheduler says), and TensorFlow
    is not imported there (the tasks run elsewhere, a login node is no place for a heavy
    import)."""
    runner = SshRunner(machine) if isinstance(machine, paramiko.SSHClient) else machine
    python = python.strip() or "python3"
    found = ask(runner, python, ["facts", "--system", "--gpus", "--which", python])
    system = None
    if found.python_missing and python != "python3":
        system = ask(runner, "python3", ["facts", "--system", "--gpus"])
    tf = ask_tensorflow(runner, python, timeout=timeout) \
        if found.data is not None and kind_probe is None else None
    facts = read_probe(python, found, tf, system, tf_timeout=timeout)
    if kind_probe is not None:
        kind_probe(runner, facts)
    return facts


def read_probe(python: str, found: ProbeAnswer, tf: ProbeAnswer | None = None,
               system: ProbeAnswer | None = None, *, tf_timeout: float = TF_TIMEOUT
               ) -> RemoteFacts:
    """Facts from the answers of `python` (`found`: the system and GPUs, `tf`: TensorFlow's
    devices) and, when `python` is missing, of the machine's python3 (`system`)."""
    facts = RemoteFacts(python_command=python)
    data = found.data or (system.data if system is not None else None) or {}
    _read_system(facts, data.get("system") or {})
    if "gpus" in data:
        read_gpus(facts, data["gpus"])
    if found.data is not None:
        facts.python_path = str(found.data.get("which") or found.data.get("executable")
                                or python)
        facts.python_version = str(found.data.get("python") or "")
    elif found.python_missing:
        facts.warnings.append("No python3 on the machine's PATH." if python == "python3" else
                              f"The Python interpreter {python!r} was not found there.")
    else:
        facts.warnings.append(f"{python} gave no answer (exit code {found.code}): "
                              f"{found.detail or 'no message'}")
    if not facts.python_path:
        facts.tf_version, facts.tf_error = "not installed", f"no {python}"
        return facts
    if tf is not None:
        view = read_tensorflow(tf, python, tf_timeout)
        facts.tf_built_with_cuda = tf_built_with_cuda(tf)
        facts.tf_gpus = list(view.gpus)
        if view.version:
            facts.tf_version = view.version
        elif view.error == NOT_INSTALLED:
            facts.tf_version = "not installed"
        else:
            facts.tf_error = view.error
    return facts


def read_tensorflow(answer: ProbeAnswer, python: str, timeout: float = TF_TIMEOUT) -> TfView:
    """TensorFlow's view from `ask_tensorflow`'s answer; `error` says why there is none."""
    if answer.python_missing:
        return TfView(error=f"there is no {python}")
    if answer.data is None:
        return TfView(error=f"importing TensorFlow failed (exit {answer.code}): {answer.detail}")
    if answer.data.get("timed_out"):
        return TfView(error=f"importing TensorFlow took longer than {timeout:g} s")
    tf = answer.data.get("tensorflow") or {}
    if not tf.get("tensorflow") and tf.get("not_installed"):
        return TfView(error=NOT_INSTALLED)
    view = tf_view(tf)
    if not view.version:
        return TfView(error=f"importing TensorFlow failed: {view.error or 'no answer'}")
    return view


def tf_built_with_cuda(answer: ProbeAnswer) -> bool | None:
    tf = (answer.data or {}).get("tensorflow") or {}
    value = tf.get("built_with_cuda")
    return None if value is None else bool(value)


def _read_system(facts: RemoteFacts, system: Mapping[str, Any]) -> None:
    facts.hostname = str(system.get("hostname") or "")
    facts.os_name = str(system.get("os_name") or "")
    facts.kernel = str(system.get("kernel") or "")
    facts.arch = str(system.get("arch") or "")
    facts.cpu_model = str(system.get("cpu_model") or "")
    facts.cpu_cores = _int(system.get("cpu_cores"))
    facts.ram_total = _int(system.get("ram_total"))


def _int(value: object) -> int:
    if not isinstance(value, (int, float, str)):
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _float(text: str) -> float:
    try:
        return float(text.strip())
    except ValueError:  # "[N/A]", "[Not Supported]"
        return 0.0


def read_gpus(facts: RemoteFacts, gpus: Mapping[str, Any]) -> None:
    """The GPUs of the machine probe's answer: NVML's list, or nvidia-smi's text."""
    if gpus.get("source") == "nvml":
        facts.gpus = [gpu_from_nvml(g) for g in gpus.get("gpus") or []]
        facts.cuda_version = str(gpus.get("cuda_version") or "")
    else:
        rc = str(gpus.get("rc", ""))
        if rc == "notfound":
            facts.gpu_error = "nvidia-smi not found (no NVIDIA driver)"
            return
        rows = [str(r) for r in gpus.get("rows") or [] if str(r).strip()]
        m = re.search(r"CUDA Version:\s*([0-9.]+)", "\n".join(gpus.get("header") or []))
        facts.cuda_version = m.group(1) if m else ""
        facts.gpus = parse_gpu_csv(rows, with_compute_cap=bool(gpus.get("compute_cap")))
        listed = gpus.get("processes")
        counts = processes_by_index([str(r) for r in listed.get("gpus") or []],
                                    [str(r) for r in listed.get("apps") or []]) \
            if isinstance(listed, Mapping) else []
        facts.gpus = [dataclasses.replace(g, processes=counts[g.index])
                      if g.index < len(counts) else g for g in facts.gpus]
        if not facts.gpus and (rc != "0" or rows):
            facts.gpu_error = f"nvidia-smi failed: {(rows[-1] if rows else 'exit ' + rc)[-200:]}"
    if facts.gpus:
        facts.driver = facts.gpus[0].driver


def processes_by_index(gpu_rows: list[str], app_rows: list[str]) -> list[int]:
    """The compute processes of each GPU from nvidia-smi's `index, uuid` rows and its
    `gpu_uuid, pid` rows (what it printed on a failure matches no GPU)."""
    by_uuid = {}
    for line in gpu_rows:
        index, _, uuid = (part.strip() for part in line.partition(","))
        if index.isdigit() and uuid:
            by_uuid[uuid] = int(index)
    counts = [0] * (max(by_uuid.values()) + 1 if by_uuid else 0)
    for line in app_rows:
        uuid = line.partition(",")[0].strip()
        if uuid in by_uuid:
            counts[by_uuid[uuid]] += 1
    return counts


def gpu_from_nvml(g: Mapping[str, Any]) -> GpuInfo:
    return GpuInfo(index=_int(g.get("index")), name=str(g.get("name", "")),
                   mem_total=_int(g.get("mem_total")), mem_used=_int(g.get("mem_used")),
                   util=float(g.get("util") or 0.0), driver=str(g.get("driver", "")),
                   compute_capability=str(g.get("compute_capability", "")),
                   processes=_int(g.get("processes")))


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
