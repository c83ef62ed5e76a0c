"""What a machine has and which of its ports are free: the one probe dtgui runs on a machine.

A program for the machine's own interpreter, run the same way on this machine (a subprocess)
and on a registered one (over SSH): ``PYTHON - COMMAND [OPTIONS]`` with this file's source on
stdin (see `dtgui.remote.probe`). Standard library only and tolerant of old Pythons down to
3.7 (it must be able to say that an interpreter is too old), so it runs in any interpreter;
TensorFlow is imported only when asked for, with its chatter kept off stdout.

Commands; ``facts`` and ``connect`` print one line ``DTGUIPROBE <json>``:

* ``facts``: the interpreter, and on request the packages and tools the worker needs, the
  system (OS, CPU, RAM), the GPUs (NVML, else nvidia-smi), TensorFlow (imported, or asked for
  its devices), a run directory made, free ports chosen and given ports tested.
* ``listen`` / ``connect``: the doctor's reachability test. A short-lived listener answers
  every connection with a token (lines ``LISTENING <pid>``, ``ACCEPTED <addr>``, ``DONE <n>``,
  or ``BINDFAIL``); ``connect`` dials it and says what it found (``--send``: and times the link).

The port check (`port_is_free`, `check_ports`) binds as TensorFlow's gRPC server does (every
address, IPv6 dual-stack where there is IPv6); dtgui itself imports these functions for the
ports of this machine.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from typing import Any

MARKER = "DTGUIPROBE "
PACKAGES = ("tensorflow", "tensorflow-cpu", "numpy", "psutil", "keras", "tf-keras",
            "tensorboard")
TOOLS = ("setsid", "nohup", "awk", "tail", "tar")
GPU_FIELDS = "name,memory.total,memory.used,utilization.gpu,driver_version"
NVIDIA_SMI_TIMEOUT = 20.0
BUSY_ERRNOS = (errno.EADDRINUSE, errno.EACCES)


# -- ports ---------------------------------------------------------------------------------------
def bind_like_tensorflow(port: int) -> socket.socket:
    """A socket bound to `port` (0: any free one) on every address, as TensorFlow's gRPC server
    binds its port: IPv6 dual-stack, else IPv4. Raises OSError (EADDRINUSE: the port is taken)."""
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError:  # no IPv6 here
        s = None
    if s is not None:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind(("::", port))
            return s
        except OSError as exc:
            s.close()
            if exc.errno in BUSY_ERRNOS:
                raise
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port))
    except OSError:
        s.close()
        raise
    return s


def port_is_free(port: int) -> bool:
    """Whether a TensorFlow server could bind `port` now. Raises OSError for failures that do
    not say the port is taken."""
    try:
        with contextlib.closing(bind_like_tensorflow(port)) as s:
            s.listen(1)
    except OSError as exc:
        if exc.errno in BUSY_ERRNOS:
            return False
        raise
    return True


def choose_free_ports(count: int) -> list[int]:
    """`count` distinct ports free now (held together while chosen, then released)."""
    held = []
    try:
        for _ in range(count):
            held.append(bind_like_tensorflow(0))
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def port_holder(port: int) -> str:
    """Which program listens on `port` ("name, pid N"), "" when `ss` cannot tell."""
    try:
        out = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True,
                             text=True, timeout=5, stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    m = re.search(r'users:\(\("([^"]+)",pid=(\d+)', out)
    return f"{m.group(1)}, pid {m.group(2)}" if m else ""


def check_ports(wanted: list[int], count: int, who: bool = False) -> dict[str, Any]:
    """`busy` (port -> who holds it, "" unknown), `errors` (port -> why it could not be
    tested) among `wanted`, and `free`: `count` free ports."""
    busy: dict[str, str] = {}
    errors: dict[str, str] = {}
    for port in wanted:
        try:
            if not port_is_free(port):
                busy[str(port)] = port_holder(port) if who else ""
        except OSError as exc:
            errors[str(port)] = f"{exc.strerror or exc} (errno {exc.errno})"
    return {"busy": busy, "errors": errors, "free": choose_free_ports(count)}


# -- the machine ---------------------------------------------------------------------------------
def package_versions() -> dict[str, str]:
    """Installed versions of the packages a run may need ("" = absent), from package metadata
    (nothing is imported)."""
    import importlib.metadata as md

    found = {}
    for name in PACKAGES:
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            found[name] = ""
    return found


def system_facts() -> dict[str, Any]:
    """Host name, OS, kernel, CPU and RAM."""
    uname = platform.uname()
    return {"hostname": uname.node or socket.gethostname(), "os_name": _os_name(),
            "kernel": f"{uname.system} {uname.release}", "arch": uname.machine,
            "cpu_cores": os.cpu_count() or 0, "cpu_model": cpu_model_name(),
            "ram_total": _ram_total()}


def _os_name() -> str:
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip("\"'")
    except OSError:
        pass
    mac = platform.mac_ver()[0]
    return f"macOS {mac}" if mac else platform.system()


def cpu_model_name() -> str:
    """The CPU's model name (also the telemetry's name of the CPU)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model",
                                               "processor\t: arm")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_total() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def nvml_gpus() -> dict[str, Any]:
    """The GPUs as the NVIDIA driver sees them through NVML (nvidia-ml-py): `gpus` (one dict a
    GPU, memory in bytes), `cuda_version`; `error` instead when NVML does not answer."""
    try:
        import pynvml
    except ImportError:
        return {"error": "nvidia-ml-py is not installed"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return {"error": f"no NVIDIA driver answered ({exc})"}
    gpus = []
    cuda = ""
    try:
        driver = nvml_text(pynvml.nvmlSystemGetDriverVersion())
        with contextlib.suppress(Exception):
            version = int(pynvml.nvmlSystemGetCudaDriverVersion())
            cuda = f"{version // 1000}.{version % 1000 // 10}"
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            try:
                util = float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            except pynvml.NVMLError:  # NotSupported on some boards
                util = 0.0
            try:
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
                cc = f"{major}.{minor}"
            except pynvml.NVMLError:
                cc = ""
            try:
                processes = len(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
            except (pynvml.NVMLError, AttributeError):  # an nvidia-ml-py without it
                processes = 0
            gpus.append({"index": i, "name": nvml_text(pynvml.nvmlDeviceGetName(handle)),
                         "mem_total": int(mem.total), "mem_used": int(mem.used), "util": util,
                         "driver": driver, "compute_capability": cc,
                         "processes": processes})
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return {"gpus": gpus, "cuda_version": cuda}


def nvml_text(value: object) -> str:
    """An NVML string (bytes from older pynvml releases) as text."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def nvidia_smi_gpus() -> dict[str, Any]:
    """nvidia-smi's answer, as text for dtgui to read: `rows` of its CSV query (with the
    compute capability when the driver knows that field, `compute_cap`), `rc` its exit code
    ("notfound" without nvidia-smi), `header` the first lines of its table (the CUDA version),
    `processes` the GPUs' compute processes (`smi_processes`)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"rc": "notfound"}
    csv = "--format=csv,noheader,nounits"
    rc, out = _run([smi, f"--query-gpu={GPU_FIELDS},compute_cap", csv])
    with_cc = rc == 0
    if not with_cc:  # drivers before that field refuse the whole query
        rc, out = _run([smi, f"--query-gpu={GPU_FIELDS}", csv])
    _, table = _run([smi])
    return {"rows": out.splitlines(), "compute_cap": with_cc, "rc": str(rc),
            "header": table.splitlines()[:6], "processes": smi_processes(smi)}


def smi_processes(smi: str) -> dict[str, list[str]]:
    """nvidia-smi's GPUs (`index, uuid`) and compute processes (`gpu_uuid, pid`), as text for
    dtgui to match (`dtgui.remote.probe.processes_by_index`)."""
    _, gpus = _run([smi, "--query-gpu=index,uuid", "--format=csv,noheader"])
    _, apps = _run([smi, "--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader"])
    return {"gpus": gpus.splitlines(), "apps": apps.splitlines()}


def _run(argv: list[str]) -> tuple[int | str, str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]} did not answer within {NVIDIA_SMI_TIMEOUT:g} s"
    except OSError as exc:
        return 127, str(exc)
    return proc.returncode, proc.stdout + proc.stderr


def gpu_facts() -> dict[str, Any]:
    """NVML when this interpreter has it, else nvidia-smi."""
    found = nvml_gpus()
    if "error" not in found:
        found["source"] = "nvml"
        return found
    smi = nvidia_smi_gpus()
    smi["source"] = "nvidia-smi"
    smi["nvml_error"] = found["error"]
    return smi


def tensorflow_facts(devices: bool) -> dict[str, Any]:
    """Import TensorFlow: its version (`tensorflow`), or `error` with why it fails; with
    `devices`, also keras, the CUDA build facts and the devices it can open."""
    result: dict[str, Any] = {"tensorflow": None, "error": None}
    try:
        import tensorflow as tf
    except BaseException as exc:  # noqa: BLE001 - a broken install fails in many ways
        text = f"{type(exc).__name__}: {exc}"
        result["error"] = text.splitlines()[0][:300] if text.strip() else type(exc).__name__
        result["not_installed"] = isinstance(exc, ImportError) and getattr(
            exc, "name", "") == "tensorflow"
        return result
    result["tensorflow"] = tf.__version__
    if not devices:
        return result
    result.update({"keras": None, "built_with_cuda": None, "cuda_version": None,
                   "cudnn_version": None, "physical_devices": [], "gpu_details": []})
    errors = []
    try:
        import keras

        result["keras"] = keras.__version__
    except Exception as exc:  # noqa: BLE001 - reported as text, the probe goes on
        errors.append(f"Cannot import keras: {type(exc).__name__}: {exc}")
    try:
        result["built_with_cuda"] = bool(tf.test.is_built_with_cuda())
        info = tf.sysconfig.get_build_info()
        result["cuda_version"] = info.get("cuda_version")
        result["cudnn_version"] = info.get("cudnn_version")
    except Exception as exc:  # noqa: BLE001 - reported as text, the probe goes on
        errors.append(f"build info: {type(exc).__name__}: {exc}")
    try:
        for dev in tf.config.list_physical_devices():
            result["physical_devices"].append({"name": dev.name, "device_type": dev.device_type})
            if dev.device_type == "GPU":
                details: dict[str, Any] = {}
                with contextlib.suppress(Exception):
                    details = dict(tf.config.experimental.get_device_details(dev))
                cc = details.get("compute_capability")
                result["gpu_details"].append({"name": dev.name,
                                              "device_name": details.get("device_name"),
                                              "compute_capability": list(cc) if cc else None})
    except Exception as exc:  # noqa: BLE001 - reported as text, the probe goes on
        errors.append(f"listing devices: {type(exc).__name__}: {exc}")
    if errors:
        result["error"] = "; ".join(errors)
    return result


def missing_modules(names: list[str]) -> list[str]:
    """Which of these top-level modules cannot be found by this interpreter."""
    import importlib.util

    missing = []
    for name in names:
        try:
            if importlib.util.find_spec(name) is None:
                missing.append(name)
        except Exception:  # noqa: BLE001 - a module that cannot even be looked up is missing
            missing.append(name)
    return missing


def facts(args: argparse.Namespace) -> dict[str, Any]:
    home = os.path.expanduser("~")
    out: dict[str, Any] = {"python": platform.python_version(), "executable": sys.executable,
                           "home": home}
    if args.which:  # the interpreter as it was named, not where it ends up (a shim, a wrapper)
        out["which"] = shutil.which(args.which) or ""
    if args.packages:
        try:
            out["packages"] = package_versions()
        except Exception as exc:  # noqa: BLE001 - no importlib.metadata (Python < 3.8)
            out["packages_error"] = repr(exc)
        out["tools"] = {t: bool(shutil.which(t)) for t in TOOLS}
    if args.system:
        out["system"] = system_facts()
    if args.gpus:
        out["gpus"] = gpu_facts()
    if args.dir:
        path = os.path.join(home, args.dir)
        try:
            os.makedirs(path, exist_ok=True)
            out["dir"] = path
        except OSError as exc:
            out["dir_error"] = str(exc)
    if args.free_ports or args.test_port:
        out["ports"] = check_ports(args.test_port, args.free_ports, who=args.who)
    if args.module:
        out["missing_modules"] = missing_modules(args.module)
    if args.data_dir:
        out["isdir"] = os.path.isdir(os.path.expanduser(args.data_dir))
    if args.tensorflow:
        out["tensorflow"] = tensorflow_facts(devices=args.tensorflow == "devices")
    return out


# -- reachability --------------------------------------------------------------------------------
def listen(bind: str, port: int, token: bytes, expect: int, lifetime: float) -> None:
    """Accept up to `expect` connections within `lifetime` s on `port` (at `bind` when that
    address is on this machine, else every address), answering each with `token`."""
    s = None
    if bind:
        family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        s = socket.socket(family, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((bind, port))
        except OSError as exc:
            s.close()
            s = None
            if exc.errno in BUSY_ERRNOS:
                _say("BINDFAIL", exc.errno, exc.strerror)
                return
    try:
        s = s or bind_like_tensorflow(port)
    except OSError as exc:
        _say("BINDFAIL", exc.errno, exc.strerror)
        return
    s.listen(64)
    _say("LISTENING", os.getpid())
    end, n = time.monotonic() + lifetime, 0
    while n < expect:
        left = end - time.monotonic()
        if left <= 0:
            break
        s.settimeout(left)
        try:
            c, addr = s.accept()
        except OSError:
            break
        with contextlib.suppress(OSError):
            c.sendall(token + b"\n")
            _serve(c, end)
        c.close()
        n += 1
        _say("ACCEPTED", addr[0])
    _say("DONE", n)


def _serve(c: socket.socket, end: float) -> None:
    """Answer a source's `PING`s and time its `SEND n` from its first quarter on (TCP's slow
    start left out), until it closes or `end`."""
    c.settimeout(max(0.1, end - time.monotonic()))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    f = c.makefile("rb")
    for line in iter(f.readline, b""):
        want, got, mark = int(line[5:]) if line.startswith(b"SEND ") else 0, 0, (0, 0.0)
        chunk = b"."
        while got < want and chunk:
            chunk = f.read1(min(1 << 16, want - got))
            got += len(chunk)
            mark = mark if mark[0] or got < want // 4 else (got, time.monotonic())
        rate = (got - mark[0]) / max(time.monotonic() - mark[1], 1e-9) if mark[0] else 0
        c.sendall(b"GOT %d %.1f\n" % (got, rate) if want else b"PONG\n")


def measure(c: socket.socket, send: int, limit: float, pings: int = 5) -> dict[str, Any]:
    """The median round trip (ms); `send` bytes sent for at most `limit` s, timed there."""
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    f, rtts, block, sent = c.makefile("rb"), [], b"\0" * (1 << 18), 0
    for _ in range(pings):
        t0 = time.monotonic()
        c.sendall(b"PING\n")
        f.readline()
        rtts.append((time.monotonic() - t0) * 1000)
    c.sendall(b"SEND %d\n" % send)
    t0 = time.monotonic()
    while sent < send and time.monotonic() - t0 < limit:
        c.sendall(block[:send - sent])
        sent += min(len(block), send - sent)
    if sent < send:
        c.shutdown(socket.SHUT_WR)
    got = f.readline().split()
    return {"rtt_ms": sorted(rtts)[pings // 2], "sent": sent, "received": int(got[1]),
            "rate": float(got[2])}


def reach_test(host: str, port: int, token: bytes, timeout: float, send: int = 0) -> dict[str, Any]:
    """`outcome` (ok, timeout, refused, unresolved, unreachable, other), `millis`, `detail`."""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return {"outcome": "unresolved", "millis": 0.0, "detail": exc.strerror or ""}
    t0 = time.monotonic()
    try:
        c = socket.create_connection((host, port), timeout=timeout)
    except socket.timeout:  # noqa: UP041 - TimeoutError only from Python 3.10
        return {"outcome": "timeout", "millis": 0.0, "detail": ""}
    except ConnectionRefusedError:
        return {"outcome": "refused", "millis": 0.0, "detail": ""}
    except OSError as exc:
        return {"outcome": "unreachable", "millis": 0.0, "detail": exc.strerror or str(exc)}
    millis = (time.monotonic() - t0) * 1000
    data = b""
    c.settimeout(max(0.5, timeout))
    try:
        while b"\n" not in data and len(data) < 200:
            chunk = c.recv(200)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    if data.strip() == token:
        try:
            found = measure(c, send, timeout) if send else {}
        except (OSError, ValueError, IndexError) as exc:
            found = {"measure_error": str(exc) or type(exc).__name__}
        c.close()
        return {"outcome": "ok", "millis": millis, "detail": "", **found}
    c.close()
    detail = f"it sent {data[:40]!r}" if data else "it sent nothing"
    return {"outcome": "other", "millis": millis, "detail": detail}


def _exit_after(seconds: float, stdout: Any) -> None:
    """A TensorFlow import can hang (a driver, a network file system): answer in time anyway,
    and end the process rather than leave it behind on the machine."""
    def stop() -> None:
        answer = {"timed_out": True, "error": f"no answer within {seconds:g} s"}
        stdout.write(MARKER + json.dumps(answer) + "\n")
        stdout.flush()
        os._exit(0)

    timer = threading.Timer(seconds, stop)
    timer.daemon = True
    timer.start()


def _say(*words: object) -> None:
    print(*words, flush=True)


# -- the program ---------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="machine_probe")
    sub = p.add_subparsers(dest="command")
    f = sub.add_parser("facts")
    f.add_argument("--packages", action="store_true", help="package versions and tools")
    f.add_argument("--system", action="store_true", help="OS, CPU, RAM")
    f.add_argument("--gpus", action="store_true", help="GPUs (NVML, else nvidia-smi)")
    f.add_argument("--tensorflow", choices=("import", "devices"), default="")
    f.add_argument("--dir", default="", help="make this directory (relative to home)")
    f.add_argument("--free-ports", type=int, default=0, help="choose this many free ports")
    f.add_argument("--test-port", type=int, action="append", default=[], help="is it free?")
    f.add_argument("--who", action="store_true", help="name who holds a busy port")
    f.add_argument("--module", action="append", default=[], help="can it be imported?")
    f.add_argument("--data-dir", default="", help="does this folder exist?")
    f.add_argument("--which", default="", help="where this command is found on PATH")
    f.add_argument("--time-limit", type=float, default=0.0,
                   help="answer `timed_out` and exit after this many seconds")
    li, c = sub.add_parser("listen"), sub.add_parser("connect")
    for name, kind in (("bind", str), ("port", int), ("token", str), ("expect", int),
                       ("lifetime", float)):
        li.add_argument(name, type=kind)
    for name, kind in (("host", str), ("port", int), ("token", str), ("timeout", float)):
        c.add_argument(name, type=kind)
    c.add_argument("--send", type=int, default=0, help="then time round trips and this transfer")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "listen":
        listen(args.bind, args.port, args.token.encode(), args.expect, args.lifetime)
        return 0
    real_stdout = sys.stdout
    if args.command == "facts" and args.time_limit > 0:
        _exit_after(args.time_limit, real_stdout)
    with contextlib.redirect_stdout(sys.stderr):  # TensorFlow's and nvidia-smi's chatter
        try:
            if args.command == "connect":
                result = reach_test(args.host, args.port, args.token.encode(), args.timeout,
                                    args.send)
            else:
                result = facts(args)
        except Exception as exc:  # noqa: BLE001 - dtgui needs an answer it can show
            result = {"error": f"{type(exc).__name__}: {exc}"}
    real_stdout.write(MARKER + json.dumps(result, default=str) + "\n")
    real_stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
