"""How probe results read in the machines panel: short cells, full details on demand."""

from __future__ import annotations

import html
import re
from collections import Counter

from dtgui.core.machines.registry import AUTH_LABELS, Machine, RemoteFacts


def short_gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def short_os(facts: RemoteFacts) -> str:
    """'Debian GNU/Linux 12 (bookworm)' -> 'Debian 12'; 'Ubuntu 22.04.4 LTS' -> 'Ubuntu 22.04'."""
    name = facts.os_name or facts.kernel
    name = re.sub(r"\s*\(.*?\)", "", name).replace("GNU/Linux ", "").replace(" LTS", "")
    m = re.fullmatch(r"(Ubuntu \d+\.\d+)\.\d+", name)
    return m.group(1) if m else name.strip()


def short_address(machine: Machine) -> str:
    host = f"[{machine.host}]" if ":" in machine.host else machine.host
    return host if machine.port == 22 else f"{host}:{machine.port}"


def address_tooltip(machine: Machine) -> str:
    how = AUTH_LABELS.get(machine.auth, machine.auth)
    if machine.auth == "key":
        how += f" ({machine.key_file})"
    via = f"\nthrough the jump host {machine.jump_host}" if machine.jump_host else ""
    return f"{machine.address}\nsigns in with {how}{via}"


def short_tf(facts: RemoteFacts) -> str:
    if facts.kind_facts is not None:
        return facts.kind_facts.tf_cell
    if facts.tf_installed:
        return facts.tf_version
    return "none" if facts.tf_version == "not installed" else "?"


def short_gpus(facts: RemoteFacts) -> str:
    if facts.kind_facts is not None:
        return facts.kind_facts.gpus_cell()
    if not facts.gpus:
        return "none" if not facts.gpu_error or "not found" in facts.gpu_error else "?"
    names = Counter(g.name.replace("NVIDIA ", "").replace("GeForce ", "") for g in facts.gpus)
    return ", ".join(f"{n}× {name}" for name, n in names.items())


def gpu_tooltip(facts: RemoteFacts) -> str:
    if facts.kind_facts is not None:
        return facts.kind_facts.gpus_tip()
    if not facts.gpus:
        return facts.gpu_error or "No NVIDIA GPU"
    lines = [f"{g.index}: {g.name}, {short_gib(g.mem_total)}"
             + (f", compute capability {g.compute_capability}" if g.compute_capability else "")
             for g in facts.gpus]
    lines.append(f"driver {facts.driver or '?'}, CUDA {facts.cuda_version or '?'}")
    return "\n".join(lines)


def details_html(machine: Machine, facts: RemoteFacts | None) -> str:
    """Everything the probe found, as a few lines of rich text."""
    e = html.escape
    head = f"<b>{e(machine.name)}</b> <span style='color:#6b7280'>{e(machine.address)}</span>"
    if facts is None:
        return head
    cpu = f"{facts.cpu_cores} cores" + (f" ({e(facts.cpu_model)})" if facts.cpu_model else "")
    py = (f"Python {e(facts.python_version)} <span style='color:#6b7280'>"
          f"{e(facts.python_path)}</span>" if facts.python_path
          else f"no {e(facts.python_command)}")
    if facts.kind_facts is not None:
        tf = facts.kind_facts.tf_detail
    elif facts.tf_installed:
        tf = f"TensorFlow {e(facts.tf_version)}"
    elif facts.tf_error:
        tf = f"TensorFlow: {e(facts.tf_error)}"
    else:
        tf = "TensorFlow not installed"
    if facts.gpus:
        gpus = e(gpu_tooltip(facts)).replace("\n", "; ")
    else:
        gpus = "no NVIDIA GPU" + (f" — {e(facts.gpu_error)}" if facts.gpu_error else "")
    lines = [
        head,
        f"{e(facts.os_name or '?')} · {e(facts.kernel)} {e(facts.arch)}",
        f"{cpu} · {short_gib(facts.ram_total)} RAM",
        f"{py} · {tf}",
    ]
    if facts.kind_facts is None or facts.gpus:  # a login node's GPUs: the nodes' are below
        lines.append(gpus)
    if facts.gpus and facts.kind_facts is None:  # whether TensorFlow can use them, and the fix
        lines.append(e(facts.as_machine_facts().explanation()))
    lines += [f"<span style='color:#b45309'>⚠ {e(w)}</span>" for w in facts.warnings]
    if facts.kind_facts is not None:
        lines += facts.kind_facts.detail_lines()
    return "<br>".join(lines)
