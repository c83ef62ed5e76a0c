"""The cluster doctor: compare machines that are to train together and say what to fix.

Pure Python (no Qt, paramiko or TensorFlow). The remote side (`dtgui.remote.doctor_checks`)
measures ports and reachability from the machines themselves and fills `PortTest` and
`ReachTest`; the probe fills `RemoteFacts`. `build_checks` turns all of it into table rows,
each `Check` with one plain detail and, for every problem, one suggested fix.

Rules: every machine needs the TensorFlow version of this machine, in the interpreter it
will train with (its Python field; a mismatch or a missing TensorFlow is a failure); a
different Python major.minor is a warning; GPUs and drivers are listed, with a warning for a
GPU whose driver does not answer, whose driver major version differs from the others, or
that TensorFlow cannot open (a CPU build); the chosen port must be free on every machine and
reachable from every other machine. On a machine with GPUs the install fix is TensorFlow's
CUDA build. Each pair's measured link (`dtgui.core.measure.network_pairs`) is a row of its own, a
warning under 1 Gbit/s, with the ring all-reduce time of a 10 M-parameter model over it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from dtgui.core.machines.hardware import GpuInfo, MachineFacts, tf_install_command
from dtgui.core.machines.registry import RemoteFacts
from dtgui.core.measure.network_pairs import (
    REFERENCE_PARAMS,
    SLOW_LINK,
    LinkTest,
    asymmetric,
    asymmetry_text,
    directions,
    link_text,
    rate_text,
    ring_allreduce_seconds,
    seconds_text,
    size_text,
)

OK, WARN, FAIL = "ok", "warn", "fail"  # Check.status
LOCAL = "this machine"
DEFAULT_PORT = 23456

# ReachTest.outcome values
REACH_OUTCOMES = ("ok", "timeout", "refused", "unresolved", "unreachable", "other", "untested")


@dataclass(frozen=True)
class Check:
    """One row of the doctor's table."""

    machine: str  # a machine name, "this machine", or "a → b" for a path between two
    topic: str
    status: str  # ok | warn | fail
    detail: str
    fix: str = ""  # what to do; "" when nothing is needed


@dataclass(frozen=True)
class PortTest:
    """Whether `port` could be bound on all addresses of `machine` (None: not tested)."""

    machine: str
    port: int
    free: bool | None
    detail: str = ""  # who holds it, or why it was not tested


@dataclass(frozen=True)
class ReachTest:
    """Whether `source` could open a TCP connection to `address:port` of `target`, where a
    short-lived test listener ran (see REACH_OUTCOMES)."""

    source: str
    target: str
    address: str
    port: int
    outcome: str
    detail: str = ""
    millis: float = 0.0
    timeout: float = 0.0
    source_address: str = ""  # the address the GUI knows the source by ("" when unknown)


def major_minor(version: str) -> str:
    parts = version.strip().split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else version.strip()


def driver_major(driver: str) -> str:
    return driver.strip().split(".")[0] if driver.strip() else ""


def _gpu_summary(gpus: list[GpuInfo]) -> str:
    names = Counter(g.name for g in gpus)
    return ", ".join(f"{n} × {name}" for name, n in names.items())


def summary(checks: list[Check]) -> tuple[int, int]:
    """(failures, warnings)."""
    return (sum(c.status == FAIL for c in checks), sum(c.status == WARN for c in checks))


def _reference_tf(local: MachineFacts | None, facts: dict[str, RemoteFacts]) -> tuple[str, str]:
    """(version every machine needs, where it comes from)."""
    if local is not None and local.tf is not None and local.tf.version:
        return local.tf.version, LOCAL
    found = Counter(f.tf_version for f in facts.values() if f.tf_installed)
    if found:
        version, _ = found.most_common(1)[0]
        first = next(n for n, f in facts.items() if f.tf_version == version)
        return version, first
    return "", ""


def build_checks(
    local: MachineFacts | None,
    facts: dict[str, RemoteFacts],
    port: int,
    ports: Sequence[PortTest] = (),
    reach: Sequence[ReachTest] = (),
    errors: dict[str, str] | None = None,
    links: Sequence[LinkTest] = (),
) -> list[Check]:
    """The doctor's rows: this machine first, then each machine, then every path between two.

    `facts` holds the machines that answered (name -> probe result, in the chosen order);
    `errors` the ones that could not be reached (name -> the plain connect message).
    """
    errors = errors or {}
    rows: list[Check] = []
    tf_ref, tf_from = _reference_tf(local, facts)
    py_ref = local.python if local is not None and local.python else ""
    local_gpus = list(local.gpus) if local is not None else []
    rows += _local_rows(local, tf_ref, tf_from)

    drivers = Counter(driver_major(g.driver) for g in local_gpus if g.driver)
    for f in facts.values():
        drivers.update({driver_major(f.driver): 1} if f.gpus and f.driver else {})
    driver_ref = drivers.most_common(1)[0][0] if drivers else ""
    with_gpus = [n for n, f in facts.items() if f.gpus] + ([LOCAL] if local_gpus else [])

    for name, message in errors.items():
        rows.append(Check(name, "Connection", FAIL, message,
                          f"Fix the connection of {name} in the Machines panel (Edit…, then "
                          "Refresh), then run the doctor again."))
    by_port = {p.machine: p for p in ports}
    for name, f in facts.items():
        rows += _python_rows(name, f, py_ref)
        rows += _tf_rows(name, f, tf_ref, tf_from)
        rows += _gpu_rows(name, f, driver_ref, with_gpus)
        if name in by_port:
            rows.append(_port_row(by_port.pop(name)))
    rows += [_port_row(p) for p in by_port.values()]
    for r in reach:
        rows.append(_reach_row(r))
    machines = len(facts) + len(errors)
    slow_ways = {id(slow): pair for pair in directions(links)
                 if (slow := asymmetric(*pair)) is not None}
    rows += [_link_row(link, machines, slow_ways.get(id(link))) for link in links]
    return rows


def _link_row(link: LinkTest, machines: int,
              pair: tuple[LinkTest, LinkTest | None] | None = None) -> Check:
    """A measured direction of a pair (`pair`: both directions, when this is the slow one)."""
    path, topic = f"{link.source} → {link.target}", "Link speed"
    if not link.ok:
        return Check(path, topic, WARN,
                     f"Not measured on port {link.port}: {link.error or 'no answer'}.",
                     "Fix the problems above, then run the doctor again.")
    n, size = max(2, machines), REFERENCE_PARAMS * 4
    took = ring_allreduce_seconds(size, n, link.bandwidth, link.rtt_ms)
    detail = (f"{link_text(link)}, port {link.port}. All-reduce of 10 M float32 parameters "
              f"({size_text(size)}) over {n} machines: about {seconds_text(took)}.")
    advice = []
    if pair is not None and pair[1] is not None:
        advice.append(asymmetry_text(link, pair[1] if pair[0] is link else pair[0]))
    if link.bandwidth < SLOW_LINK:
        advice.append(f"{rate_text(link.bandwidth)} is slow for synchronous training: use a "
                      "faster link (10 GbE or better) between these machines, fewer machines, "
                      "or a larger per-replica batch or gradient accumulation so that fewer "
                      "all-reduces cross it.")
    return Check(path, topic, WARN if advice else OK, detail, " ".join(advice))


def _local_rows(local: MachineFacts | None, tf_ref: str, tf_from: str) -> list[Check]:
    if local is None:
        return [Check(LOCAL, "Python / TensorFlow", WARN,
                      "This machine has not been examined yet, so the others are compared "
                      "with each other only.", "Wait for the 'This machine' panel, then run "
                      "the doctor again.")]
    rows = [Check(LOCAL, "Python", OK, f"Python {local.python} (the reference)")]
    if local.tf is None:
        rows.append(Check(LOCAL, "TensorFlow", WARN,
                          "TensorFlow is still being asked for its version here; "
                          + (f"the machines are compared with {tf_from} ({tf_ref})."
                             if tf_ref else "the machines are compared with each other."),
                          "Run the doctor again when the 'This machine' panel shows TensorFlow."))
    elif not local.tf.version:
        fix = f"{tf_install_command(tf_ref, gpus=bool(local.gpus))} on this machine"
        rows.append(Check(LOCAL, "TensorFlow", FAIL,
                          f"TensorFlow is not usable here: {local.tf.error or 'not installed'}.",
                          fix))
    else:
        rows.append(Check(LOCAL, "TensorFlow", OK,
                          f"TensorFlow {local.tf.version} (every machine needs this version)"))
    if local.gpus:
        driver = local.gpus[0].driver
        rows.append(Check(LOCAL, "GPUs", OK,
                          f"{_gpu_summary(local.gpus)}; driver {driver or '?'}"))
    else:
        rows.append(Check(LOCAL, "GPUs", OK, "No NVIDIA GPU (CPU only)"))
    return rows


def _python_rows(name: str, f: RemoteFacts, py_ref: str) -> list[Check]:
    if not f.python_path and f.python_command != "python3":
        return [Check(name, "Python", FAIL,
                      f"The Python interpreter {f.python_command!r} was not found there.",
                      f"Give the path of the Python with TensorFlow on {name} in its Python "
                      "field (Machines panel, Edit…), or leave the field empty for python3.")]
    if not f.python_path:
        return [Check(name, "Python", FAIL, "No python3 on the PATH of the login shell.",
                      f"Install Python 3 on {name} (Debian/Ubuntu: sudo apt install python3 "
                      "python3-venv), or put it on the PATH.")]
    version = f.python_version or "?"
    detail = f"Python {version} ({f.python_path})"
    if py_ref and f.python_version and major_minor(f.python_version) != major_minor(py_ref):
        want = major_minor(py_ref)
        return [Check(name, "Python", WARN,
                      f"{detail}; this machine has {py_ref}.",
                      f"Use Python {want} on {name} too (for example python{want} -m venv "
                      f"~/dtgui-venv) so that every machine runs the same TensorFlow wheel.")]
    return [Check(name, "Python", OK, detail)]


def _tf_rows(name: str, f: RemoteFacts, tf_ref: str, tf_from: str) -> list[Check]:
    pin = tf_install_command(tf_ref, gpus=bool(f.gpus))
    py = f.python_path or f.python_command
    fix = f"{pin} on {name} (for {py})"
    if not f.python_path:
        return [Check(name, "TensorFlow", FAIL, f"Not installed: there is no {py}.",
                      f"Install Python 3 on {name}, then {pin}.")]
    if f.tf_error and not f.tf_installed:
        return [Check(name, "TensorFlow", FAIL, f"TensorFlow is not usable: {f.tf_error}.",
                      f"See why on {name}: {py} -c 'import tensorflow'; then {fix}.")]
    if not f.tf_installed:
        want = f" (this machine has {tf_ref})" if tf_from == LOCAL else (
            f" ({tf_from} has {tf_ref})" if tf_ref else "")
        return [Check(name, "TensorFlow", FAIL, f"TensorFlow is not installed{want}.", fix)]
    if tf_ref and f.tf_version != tf_ref:
        where = "this machine" if tf_from == LOCAL else tf_from
        return [Check(name, "TensorFlow", FAIL,
                      f"TensorFlow {f.tf_version}, but {where} has {tf_ref}: every machine of "
                      "a cluster needs the same version.", fix)]
    return [Check(name, "TensorFlow", OK, f"TensorFlow {f.tf_version}")]


def _gpu_rows(name: str, f: RemoteFacts, driver_ref: str, with_gpus: list[str]) -> list[Check]:
    cuda = f", CUDA {f.cuda_version}" if f.cuda_version else ""
    if f.gpus:
        driver = f.driver or f.gpus[0].driver
        detail = f"{_gpu_summary(f.gpus)}; driver {driver or '?'}{cuda}"
        if not driver:
            return [Check(name, "GPUs", WARN, f"{detail}: the driver version is unknown.",
                          f"Check the NVIDIA driver on {name}: nvidia-smi must print its "
                          "version.")]
        if driver_ref and driver_major(driver) != driver_ref:
            return [Check(name, "GPUs", WARN,
                          f"{detail}; the other GPU machines run driver {driver_ref}.",
                          f"Install NVIDIA driver {driver_ref} on {name} too, so every machine "
                          "supports the CUDA version TensorFlow was built for.")]
        if f.tf_installed and f.tf_built_with_cuda is not None and not f.tf_gpus:
            why = ("is a CPU build" if not f.tf_built_with_cuda
                   else "cannot open them (CUDA or cuDNN libraries missing)")
            return [Check(name, "GPUs", WARN,
                          f"{detail}; but TensorFlow {f.tf_version} there {why}: it trains on "
                          "the CPU.",
                          f"{tf_install_command(f.tf_version, gpus=True)} on {name} (for "
                          f"{f.python_path or f.python_command}).")]
        return [Check(name, "GPUs", OK, detail)]
    if f.gpu_error and "not found" not in f.gpu_error:
        return [Check(name, "GPUs", WARN, f"No GPU list: {f.gpu_error}.",
                      f"The NVIDIA driver does not answer on {name}: reinstall or reload it "
                      "(nvidia-smi must work; a reboot after a driver update often helps).")]
    others = [n for n in with_gpus if n != name]
    if others:
        return [Check(name, "GPUs", WARN,
                      f"No NVIDIA GPU (CPU only), while {', '.join(others)} have GPUs.",
                      "Train on machines of one kind: a synchronous cluster runs at the pace "
                      f"of its slowest worker; leave {name} out or use CPUs everywhere.")]
    return [Check(name, "GPUs", OK, "No NVIDIA GPU (CPU only)")]


def _port_row(p: PortTest) -> Check:
    topic = f"Port {p.port} free"
    if p.free:
        return Check(p.machine, topic, OK, f"Port {p.port} is free.")
    if p.free is None:
        return Check(p.machine, topic, WARN, f"Not tested: {p.detail or 'unknown reason'}.",
                     f"Make the Python of {p.machine} work (see its Python row), then run "
                     "the doctor again.")
    who = f" ({p.detail})" if p.detail else ""
    return Check(p.machine, topic, FAIL,
                 f"Port {p.port} is in use by another program{who}.",
                 f"Choose another port (for example {p.port + 1}), or stop the program that "
                 f"holds port {p.port} on {p.machine} (see: ss -ltnp 'sport = :{p.port}').")


def _reach_row(r: ReachTest) -> Check:
    path, topic = f"{r.source} → {r.target}", f"Reach port {r.port}"
    where = f"{r.address}:{r.port}"
    source = r.source_address or f"<{r.source}'s address>"
    firewall = (f"Open TCP port {r.port} in the firewall of {r.target} for {r.source} "
                f"(for example: sudo ufw allow proto tcp from {source} to any port {r.port}), "
                "or choose another port.")
    wait = f" within {r.timeout:g} s" if r.timeout else ""
    if r.outcome == "ok":
        took = f"{r.millis:.0f} ms" if r.millis >= 1 else "under 1 ms"
        return Check(path, topic, OK, f"Connected to {where} in {took}.")
    if r.outcome == "timeout":
        return Check(path, topic, FAIL,
                     f"No answer from {where}{wait}: a firewall drops the connection.", firewall)
    if r.outcome == "refused":
        return Check(path, topic, FAIL,
                     f"{where} refused the connection although the test listener was running: "
                     "a firewall rejects it.", firewall)
    if r.outcome == "unresolved":
        return Check(path, topic, FAIL,
                     f"{r.source} cannot look up the name {r.address!r}.",
                     f"Use {r.target}'s IP address in its machine settings, or make the name "
                     f"resolvable on {r.source} (DNS or /etc/hosts).")
    if r.outcome == "unreachable":
        return Check(path, topic, FAIL,
                     f"{r.source} has no way to {where}: {r.detail or 'no route'}.",
                     f"Put {r.source} and {r.target} on a network where they reach each other "
                     f"(check routes and VPNs), or give {r.target} an address {r.source} can "
                     "reach.")
    if r.outcome == "other":
        return Check(path, topic, FAIL,
                     f"Something other than the test listener answered on {where} "
                     f"({r.detail or 'a proxy or port forwarding'}).",
                     f"Choose another port, or remove the port forwarding to {where}.")
    return Check(path, topic, WARN, f"Not tested: {r.detail or 'unknown reason'}.",
                 "Fix the problems above, then run the doctor again.")
