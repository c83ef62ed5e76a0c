"""Across machines on shaped links: dtgui's MultiWorkerMirrored against a hand-written loop.

    python3 packaging/benchmark_links.py [--quick] [--steps 60] [--packs 0,4,32]   (root)

The machines are the SSH test hosts (tests/sshhosts.py), each in its own network namespace,
their links shaped with tc HTB to each peer (tests/netfaults.py `throttled`, as the doctor's
slow-link test) at 100 Mbit/s, 1 Gbit/s and 10 Gbit/s; the lab's lock is held for the whole
run (other sessions' SSH tests wait). The model is programs/links_model.py (14.7 M
parameters, synthetic data), one task a machine, the same batch (32 a worker), Adam, seed,
deterministic ops and 5 steps per call for every program:

- dtgui default: the training program of a bundle (`python -m dtgui.worker.train`, the
  plan's defaults: gradients all-reduced in float32);
- dtgui recommended: the same with the settings dtgui recommends when the all-reduce
  dominates (gradients compressed to float16 for the all-reduce, applied in float32);
- hand-written: programs/links_handwritten.py, MultiWorkerMirrored's custom loop with the
  same steps per call.

Each prints steps/s after the warm-up; the all-reduce's time a step against the link's floor
2(N-1)/N x gradient bytes / measured bandwidth; the CPU seconds a step of all the run's
processes over the measured window; scaling efficiency (steps/s against the one machine's,
the hand-written loop alone on one host, the batch a worker the same) and the final loss (the
last call's mean). The all-reduce's time is a step's time less the compute step of the same
row: the N hosts each running the hand-written loop alone at the same time, so the compute
shares the cores as the row's training does (all hosts share this machine's cores: compute is
slower than on real machines, and the compute share of a step larger). `--packs` adds rows
at 2 machines and 1 Gbit/s: dtgui default and recommended with each pack size
(`bytes_per_pack`, MiB; 0 is TensorFlow's default, one pack). `--quick`: 2 machines at 1
Gbit/s alone, the ratio (dtgui recommended over hand-written) printed last.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PROGRAMS = REPO / "packaging" / "benchmarks" / "programs"
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "packaging" / "benchmarks"))
sys.path.insert(0, str(REPO))
import netfaults  # noqa: E402 - the test lab's modules, from the tests folder
import sshhosts  # noqa: E402
from cpu_window import CpuWindow  # noqa: E402
from worker_helpers import kinds, read_events, step_means  # noqa: E402

from dtgui.worker.plan import GradCompression, Plan, TaskSpec  # noqa: E402
from dtgui.worker.strategies import Strategy  # noqa: E402

RATES = {"100 Mbit/s": 100.0, "1 Gbit/s": 1000.0, "10 Gbit/s": 10000.0}
PORT = 23456
PER_CALL, BATCH, WARMUP = 5, 32, 10
KINDS = ("dtgui default", "dtgui recommended", "hand-written")
PARAMS_BYTES = 4 * (1024 * 2048 + 2048 + 3 * (2048 * 2048 + 2048) + 2048 * 10 + 10)
MIB = 1 << 20


def in_host(host: sshhosts.Host, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", host.netns, *argv] if host.netns else argv


def env(cluster: list[str], index: int) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    out.update(PYTHONPATH=f"{REPO}:{PROGRAMS}", TF_CPP_MIN_LOG_LEVEL="2",
               CUDA_VISIBLE_DEVICES="",
               TF_CONFIG=json.dumps({"cluster": {"worker": cluster},
                                     "task": {"type": "worker", "index": index}}))
    return out


def dtgui_plan(hosts: list[sshhosts.Host], steps: int, compression: GradCompression,
               bytes_per_pack: int = 0) -> Plan:
    tasks = tuple(TaskSpec("worker", i, h.address, PORT, machine=h.name)
                  for i, h in enumerate(hosts))
    return Plan(run_name="links", strategy=Strategy.MULTI_WORKER_MIRRORED, replicas_per_task=1,
                workers=len(hosts), per_replica_batch=BATCH, steps=steps, steps_per_epoch=steps,
                steps_per_call=PER_CALL, checkpoint_every=0, grad_compression=compression,
                bytes_per_pack=bytes_per_pack,
                cluster={"worker": [t.address for t in tasks]}, tasks=tasks)


def with_cpu(procs: list[subprocess.Popen[Any]], window: CpuWindow,
             result: dict[str, float], began: float, ended: float) -> dict[str, float]:
    """`result` with the CPU seconds a step of `procs` and the machine's busy share over the
    measured window (wall-clock `began` .. `ended`)."""
    used, busy = window.between(began, ended)
    steps = result["steps_per_s"] * (ended - began)
    return {**result, "cpu_per_step": used / max(steps, 1e-9), "busy": busy}


def run_dtgui(hosts: list[sshhosts.Host], steps: int, compression: GradCompression,
              root: Path, bytes_per_pack: int = 0) -> dict[str, float]:
    bundle = Path(tempfile.mkdtemp(dir=root))
    plan = dtgui_plan(hosts, steps, compression, bytes_per_pack)
    (bundle / "links_model.py").write_text((PROGRAMS / "links_model.py").read_text())
    plan_data = json.loads(plan.to_json())
    plan_data["model"] = {"kind": "file", "path": "links_model.py", "project": ""}
    (bundle / "plan.json").write_text(json.dumps(plan_data))
    cluster = list(plan.cluster["worker"])
    procs = [subprocess.Popen(in_host(h, [sys.executable, "-m", "dtgui.worker.train", "--plan",
                                          "plan.json", "--task", f"worker:{i}", "--out",
                                          "output"]),
                              cwd=bundle, env=env(cluster, i), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
             for i, h in enumerate(hosts)]
    window = CpuWindow([p.pid for p in procs]).start()
    try:
        for proc in procs:
            proc.wait(timeout=900)
    finally:
        window.stop()
    events = read_events(bundle, "worker:0")
    finished = kinds(events, "finished")
    if not finished:
        failed = kinds(events, "failed")
        raise RuntimeError(f"dtgui run failed: {failed[-1] if failed else 'no events'}")
    timeline = finished[-1]["timeline"]
    start = next(mark for mark in timeline if mark[0] >= WARMUP)
    end = timeline[-1]
    means = step_means(events)
    last = sorted(means)[-PER_CALL:]
    calls = kinds(events, "steps")  # the same calls on the wall clock
    began = next(e["t"] for e in calls if e["first"] + e["count"] - 1 >= WARMUP)
    return with_cpu(procs, window,
                    {"steps_per_s": (end[0] - start[0]) / (end[1] - start[1]),
                     "final_loss": sum(means[s] for s in last) / len(last)},
                    began, calls[-1]["t"])


def run_handwritten(hosts: list[sshhosts.Host], steps: int,
                    apart: bool = False) -> dict[str, float]:
    """The hand-written loop on `hosts` together (`apart`: each host alone, all at once; the
    mean of their steps/s)."""
    cluster = [f"{h.address}:{PORT}" for h in hosts]
    procs = [subprocess.Popen(in_host(h, [sys.executable, str(PROGRAMS / "links_handwritten.py"),
                                          "--steps", str(steps), "--warmup", str(WARMUP),
                                          "--per-call", str(PER_CALL), "--batch", str(BATCH)]),
                              env=env([cluster[i]], 0) if apart else env(cluster, i),
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for i, h in enumerate(hosts)]
    window = CpuWindow([p.pid for p in procs]).start()
    try:
        outs = [proc.communicate(timeout=900)[0] for proc in procs]
    finally:
        window.stop()
    if any(p.returncode for p in procs):
        raise RuntimeError("the hand-written loop failed")
    results = [json.loads(out.strip().splitlines()[-1]) for out in outs]
    first: dict[str, float] = results[0]
    if apart:
        first["steps_per_s"] = sum(r["steps_per_s"] for r in results) / len(results)
    return with_cpu(procs, window, first, min(r["t0"] for r in results),
                    max(r["t1"] for r in results))


def bandwidth(source: sshhosts.Host, target: sshhosts.Host, seconds: float = 1.5) -> float:
    """Bytes/s from `source` to `target` over one TCP stream (as the collective's)."""
    code = ("import socket, sys, time\n"
            "s = socket.create_connection((sys.argv[1], int(sys.argv[2])))\n"
            "chunk = b'x' * (1 << 20); end = time.monotonic() + float(sys.argv[3])\n"
            "while time.monotonic() < end: s.sendall(chunk)\n"
            "s.close()\n")
    receiver = subprocess.Popen(in_host(target, [sys.executable, "-c",
                                                 "import socket,sys\n"
                                                 "l=socket.socket();l.bind((sys.argv[1],"
                                                 "int(sys.argv[2])));l.listen();print('up',"
                                                 "flush=True)\nc,_=l.accept();n=0\n"
                                                 "while d:=c.recv(1<<20): n+=len(d)\n"
                                                 "print(n,flush=True)",
                                                 target.address, str(PORT + 1)]),
                                stdout=subprocess.PIPE, text=True)
    assert receiver.stdout is not None and receiver.stdout.readline().strip() == "up"
    began = time.monotonic()
    subprocess.run(in_host(source, [sys.executable, "-c", code, target.address, str(PORT + 1),
                                    str(seconds)]), check=True, timeout=60)
    received = int(receiver.stdout.readline())
    receiver.wait(10)
    return received / (time.monotonic() - began)


def shaped(lab: sshhosts.SshLab, hosts: list[sshhosts.Host], mbit: float) -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    for host in hosts:
        peers = {p.address: mbit for p in hosts if p is not host}
        stack.enter_context(netfaults.throttled(host, peers))
    return stack


def row(lab: sshhosts.SshLab, machines: int, rate: str, steps: int, root: Path,
        one_machine: float, packs: tuple[int, ...] = ()) -> dict[str, Any]:
    """One row: each kind on `machines` hosts at `rate`; with `packs` (MiB) dtgui default
    and recommended once a pack size instead of the three kinds."""
    hosts = lab.hosts[:machines]
    if RATES[rate] < 1000:  # seconds a step: the warm-up and 10 steps measure it
        steps = min(steps, WARMUP + 10)
    with shaped(lab, hosts, RATES[rate]):
        measured = bandwidth(hosts[0], hosts[1])
        compute = run_handwritten(hosts, steps, apart=True)  # the cores shared as below
        if packs:
            results = {f"{name} {mib} MiB": run_dtgui(hosts, steps, compression, root, mib * MIB)
                       for mib in packs
                       for name, compression in (("default", GradCompression.NONE),
                                                 ("recommended", GradCompression.FLOAT16))}
        else:
            results = {
                "dtgui default": run_dtgui(hosts, steps, GradCompression.NONE, root),
                "dtgui recommended": run_dtgui(hosts, steps, GradCompression.FLOAT16, root),
                "hand-written": run_handwritten(hosts, steps),
            }
    floor32 = 2 * (machines - 1) / machines * PARAMS_BYTES / measured
    out: dict[str, Any] = {"machines": machines, "rate": rate, "bandwidth": measured,
                           "compute": compute, "kinds": list(results)}
    for kind, res in results.items():
        wire = 0.5 if "recommended" in kind else 1.0
        step = 1 / res["steps_per_s"]
        reduce = max(0.0, step - 1 / compute["steps_per_s"])
        out[kind] = {**res, "all_reduce_s": reduce, "floor_s": floor32 * wire,
                     "efficiency": res["steps_per_s"] / one_machine}
    return out


def print_row(r: dict[str, Any]) -> None:
    compute = r["compute"]
    print(f"\n{r['machines']} machines at {r['rate']} (measured {r['bandwidth'] * 8 / 1e6:.0f} "
          f"Mbit/s; compute alone {compute['steps_per_s']:.2f} steps/s, "
          f"{compute['cpu_per_step']:.2f} CPU s a step, machine {compute['busy']:.0%} busy):")
    print(f"  {'':24} {'steps/s':>8} {'all-reduce':>11} {'floor':>7} {'x floor':>8} "
          f"{'CPU s':>6} {'busy':>5} {'scaling':>8} {'final loss':>11}")
    for kind in r["kinds"]:
        k = r[kind]
        print(f"  {kind:24} {k['steps_per_s']:8.2f} {k['all_reduce_s']:10.3f}s "
              f"{k['floor_s']:6.3f}s {k['all_reduce_s'] / k['floor_s']:8.2f} "
              f"{k['cpu_per_step']:6.2f} {k['busy']:5.0%} "
              f"{k['efficiency']:8.2f} {k['final_loss']:11.4f}")
    if "hand-written" in r:
        ratio = r["dtgui recommended"]["steps_per_s"] / r["hand-written"]["steps_per_s"]
        default = r["dtgui default"]["steps_per_s"] / r["hand-written"]["steps_per_s"]
        print(f"  dtgui default / hand-written: {default:.2f}; "
              f"dtgui recommended / hand-written: {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="2 machines at 1 Gbit/s alone (under 5 minutes)")
    parser.add_argument("--steps", type=int, default=0, help="steps a run (default 40, 60)")
    parser.add_argument("--packs", default="",
                        help="pack sizes in MiB, e.g. 0,4,32: rows at 2 machines, 1 Gbit/s "
                             "(alone, unless with --rows)")
    parser.add_argument("--rows", default="",
                        help="only these rows, e.g. 4@10: machines@Gbit/s (0.1, 1, 10)")
    args = parser.parse_args()
    if reason := sshhosts.unavailable_reason():
        sys.exit(f"benchmark_links: {reason}")
    steps = args.steps or (40 if args.quick else 60)
    packs = tuple(int(p) for p in args.packs.split(",") if p.strip())
    layout = [(2, "1 Gbit/s")] if args.quick else [
        (n, rate) for n in (2, 4) for rate in RATES]
    if args.rows:
        names = {f"{RATES[rate] / 1000:g}": rate for rate in RATES}
        layout = [(int(n), names[g]) for n, g in (r.split("@") for r in args.rows.split(","))]
    if packs and not args.rows:  # the pack rows alone
        layout = []
    count = max([n for n, _ in layout] + [2])
    lab = sshhosts.SshLab(count).start()  # holds the lab's lock until stop()
    try:
        if lab.mode != "netns" or netfaults.shaping_unavailable(lab.hosts[0]):
            sys.exit("benchmark_links: needs network namespaces and tc (root, iproute2)")
        with tempfile.TemporaryDirectory(prefix="dtgui-links-") as tmp:
            began = time.monotonic()
            one = run_handwritten(lab.hosts[:1], steps)
            print(f"one machine (hand-written): {one['steps_per_s']:.2f} steps/s, final loss "
                  f"{one['final_loss']:.4f}; gradients {PARAMS_BYTES / 1e6:.1f} MB float32")
            rows = []
            for machines, rate in layout:
                rows.append(row(lab, machines, rate, steps, Path(tmp), one["steps_per_s"]))
                print_row(rows[-1])
            if packs:
                print_row(row(lab, 2, "1 Gbit/s", steps, Path(tmp), one["steps_per_s"], packs))
            print(f"\n({time.monotonic() - began:.0f} s)")
            if rows:  # the quick row's ratio (the goal's), else the first row's
                last = next((r for r in rows if (r["machines"], r["rate"]) == (2, "1 Gbit/s")),
                            rows[0])
                ratio = (last["dtgui recommended"]["steps_per_s"]
                         / last["hand-written"]["steps_per_s"])
                print(f"ratio (dtgui recommended / hand-written, {last['machines']} machines at "
                      f"{last['rate']}): {ratio:.2f}  final losses "
                      f"{last['dtgui recommended']['final_loss']:.4f} / "
                      f"{last['hand-written']['final_loss']:.4f}")
    finally:
        lab.stop()


if __name__ == "__main__":
    main()
