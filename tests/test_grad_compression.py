"""Gradients compressed for the all-reduce: the plan's levers, where they are refused and
why, and the mechanism in dtgui's training call (the all-reduce carries float16, the update
is applied in float32, the optimizer's own float32 all-reduce is skipped). What compression
does to learning over 2,000 steps is packaging/benchmark_links.py's check (docs/performance.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fakes import started_event

from dtgui.core.measure.all_reduce_levers import plan_forecast
from dtgui.core.measure.bottleneck import COMMUNICATION, StepSplit, plan_facts, verdict
from dtgui.core.measure.network_pairs import LinkTest
from dtgui.core.plans.plan import GradCompression, Plan, ScriptModel, TaskSpec, validate
from dtgui.core.plans.plan_text import all_reduce_text
from dtgui.core.plans.strategies import Strategy
from dtgui.core.run_curves import RunCurves
from dtgui.worker.model_file import describe_failure

PROBE = Path(__file__).with_name("compression_probe.py")


def test_the_levers_round_trip_plan_json_and_read_in_words() -> None:
    plan = Plan(strategy=Strategy.MULTI_WORKER_MIRRORED, replicas_per_task=1, workers=2,
                grad_compression=GradCompression.BFLOAT16, bytes_per_pack=4 << 20)
    again = Plan.from_dict(json.loads(plan.to_json()))
    assert again.grad_compression is GradCompression.BFLOAT16
    assert again.bytes_per_pack == 4 << 20
    assert validate(again) == []
    assert all_reduce_text(again) == "bfloat16, 4 MiB packs"
    # written only when set: an uncompressed plan reads in a dtgui from before the levers,
    # and a plan.json without them (one written before) trains uncompressed
    assert "grad_compression" in plan.to_dict()
    old = Plan().to_dict()
    assert "grad_compression" not in old and "bytes_per_pack" not in old
    assert Plan.from_dict(old).grad_compression is GradCompression.NONE
    assert all_reduce_text(Plan.from_dict(old)) == ""


def test_the_levers_are_refused_where_there_is_no_all_reduce_to_compress() -> None:
    f16 = GradCompression.FLOAT16
    ps = Plan(strategy=Strategy.PARAMETER_SERVER, workers=2, parameter_servers=1,
              replicas_per_task=1, grad_compression=f16)
    assert any("ParameterServer has no all-reduce" in e for e in validate(ps))
    one = Plan(strategy=Strategy.ONE_DEVICE, replicas_per_task=1, grad_compression=f16)
    assert any("nothing to all-reduce" in e for e in validate(one))
    script = Plan(strategy=Strategy.MULTI_WORKER_MIRRORED, replicas_per_task=1,
                  model=ScriptModel("/tmp", "train.py"), grad_compression=f16)
    assert any("Your own script does its own all-reduce" in e for e in validate(script))
    packs = Plan(strategy=Strategy.MIRRORED, bytes_per_pack=1 << 20)
    assert any("does not split its all-reduce into packs" in e for e in validate(packs))
    assert validate(Plan(strategy=Strategy.MIRRORED, grad_compression=f16)) == []


def test_the_card_says_what_crosses_the_network_and_why_it_fell_back() -> None:
    def started(**fields: str) -> RunCurves:
        curves = RunCurves()
        curves.add_event(started_event([0, 1], 10, "worker:0", "mirrored", **fields))
        return curves

    assert "as float16" in started(grad_compression="float16").all_reduce_note
    fell = started(grad_compression="none",
                   compression_fallback="this TensorFlow's collective cannot sum bfloat16 "
                                        "on GPU")
    assert fell.all_reduce_note.startswith("Uncompressed: this TensorFlow's collective")
    assert started(grad_compression="none").all_reduce_note == ""


def test_a_peer_that_all_reduces_another_dtype_fails_the_run_with_the_reason() -> None:
    """What TensorFlow's collective says when one worker compresses and a peer (an older
    bundle's, another plan's) does not: the run's error names both dtypes and what to do."""
    error = RuntimeError("Collective ops is aborted by: Collective instance 124 expected type 0 "
                         "and data_type 1 but got type 0 and data_type 19")
    text = describe_failure(error)
    assert text.startswith("The workers all-reduce their gradients in different dtypes "
                           "(float32 and float16)")
    assert "same bundle" in text and "grad_compression to none" in text


@pytest.mark.slow
def test_the_all_reduce_carries_float16_and_the_update_is_applied_in_float32() -> None:
    """One SGD update (rate 1) through the training call: compressed, the only all-reduce
    carries float16 (the optimizer's float32 one is skipped) and the weights move by the
    float16-rounded gradient, in float32; uncompressed, by the float32 gradient."""
    procs = {c: subprocess.Popen([sys.executable, str(PROBE), c], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
             for c in ("float16", "none")}
    out = {}
    for name, proc in procs.items():
        stdout, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0, name
        out[name] = json.loads(stdout.strip().splitlines()[-1])
    small, full = out["float16"], out["none"]
    assert small["applied"] == "float16" and not small["fallback"]
    assert small["all_reduces"] == [["float16", "float16"]]
    assert full["all_reduces"] == [["float32", "float32"]]
    for run in (small, full):
        assert run["variables"] == ["float32"]
    assert small["before"] == full["before"] and small["grads"] == full["grads"]
    for before, grad, after_small, after_full in zip(small["before"], small["grads"],
                                                     small["after"], full["after"], strict=True):
        w, g = np.asarray(before, np.float32), np.asarray(grad, np.float32)
        rounded = g.astype(np.float16).astype(np.float32)
        assert np.asarray(after_small, np.float32) == pytest.approx(w - rounded, abs=1e-6)
        assert np.asarray(after_full, np.float32) == pytest.approx(w - g, abs=1e-6)
        assert not np.array_equal(rounded, g)  # the rounding shows in the update


def two_machines(**changes: object) -> Plan:
    tasks = (TaskSpec("worker", 0, "10.0.0.2", 2222, machine="a"),
             TaskSpec("worker", 1, "10.0.0.3", 2222, machine="b"))
    plan = Plan(strategy=Strategy.MULTI_WORKER_MIRRORED, replicas_per_task=1, workers=2,
                tasks=tasks)
    return plan.with_changes(**changes)


def test_a_network_bound_verdict_names_the_lever_and_its_gain() -> None:
    """The all-reduce takes 60 % of a step: compressing it halves that part, 1 / (1 - 0.3)
    = 1.4x the steps/s; once compressed the lever is not named again; a script is told
    in words what to set (compression; no pack size, which measured no gain)."""
    split = [StepSplit("worker:0", step=100, compute=0.04, communication=0.06)]
    found = verdict(split, plan_facts(two_machines()))
    assert found.limit == COMMUNICATION
    assert "compress the gradients for the all-reduce" in found.advice
    assert "about 1.4× the steps/s" in found.advice
    done = verdict(split, plan_facts(two_machines(grad_compression=GradCompression.FLOAT16)))
    assert "compress the gradients" not in done.advice
    script = verdict(split, plan_facts(two_machines(model=ScriptModel("/tmp", "train.py"))))
    assert "in your script, cast the gradients to float16" in script.advice
    # the levers measured to win only: no pack size gained beyond the machine's load
    assert "bytes_per_pack" not in script.advice


def test_the_review_predicts_the_step_on_the_measured_links() -> None:
    """59 MB of gradients over 2 machines on 1 Gbit/s (125 MB/s): a 0.47 s all-reduce beside
    0.2 s of compute dominates, and compression predicts (0.67) / (0.2 + 0.235) = 1.5x; a
    small model's all-reduce does not dominate; unmeasured links are said."""
    link = LinkTest("a", "b", 2222, rtt_ms=0.0, bandwidth=125e6)
    text = plan_forecast(two_machines(), [link], 58_800_000, 0.2)
    assert "compute 200 ms, all-reduce 470 ms a step" in text
    assert "the all-reduce dominates" in text and "about 1.5× the steps/s" in text
    small = plan_forecast(two_machines(), [link], 400_000, 0.2)
    assert "dominates" not in small and small.endswith("a step.")
    assert "has not measured the links between a, b" in plan_forecast(two_machines(), [],
                                                                       58_800_000, 0.2)
    assert plan_forecast(Plan(strategy=Strategy.MIRRORED), [link], 58_800_000, 0.2) == ""
