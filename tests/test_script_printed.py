"""Metrics from the lines a user's script prints: the one parser (dtgui.worker.printed_metrics),
the supervisor's script child reading a script's output into events, the reducer taking each
metric once, the script's progress, the honest words for a script plan, and the Keras 2 names
found before launch. No TensorFlow here (the real runs are in test_script_runs.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from dtgui.core.events import Event, read_all
from dtgui.core.plans.plan import MetricsTasks, Plan, TaskSpec
from dtgui.core.plans.plan_text import script_rows, script_summary, script_text
from dtgui.core.plans.strategies import Strategy
from dtgui.core.run_curves import RunCurves
from dtgui.core.scripts.script import ScriptModel, script_problems
from dtgui.launch.checks.script_check import study
from dtgui.worker.events import EventWriter
from dtgui.worker.printed_metrics import LineParser, compile_patterns, metric_name, preview
from dtgui.worker.script_child import ScriptChild

ROOT = Path(__file__).resolve().parent.parent
PROJECTS = ROOT / "tests" / "script_projects"
TUTORIAL_LINES = ["Epoch: 0, accuracy: 0.327567, train_loss: 1.820119.",
                  "Epoch: 1, accuracy: 0.518000, train_loss: 1.402400.",
                  "Epoch: 2, accuracy: 0.611000, train_loss: 1.100300."]
IT_PATTERN = r"\[it (?P<step>\d+)\] loss=(?P<loss>\S+) lr=(?P<lr>\S+)"


def values(parser: LineParser, line: str) -> dict[str, tuple[float, float, str]]:
    return {r.name: (r.value, r.step, r.axis) for r in parser.feed(line).readings}


# -- the parser -------------------------------------------------------------------------------

def test_tutorial_epoch_lines_give_values_on_the_epoch_axis() -> None:
    parser = LineParser()
    assert values(parser, TUTORIAL_LINES[0]) == {"accuracy": (0.327567, 0.0, "epoch"),
                                                 "train_loss": (1.820119, 0.0, "epoch")}
    assert values(parser, TUTORIAL_LINES[1])["train_loss"] == (1.4024, 1.0, "epoch")
    assert parser.epochs_done(1) == 2  # numbered from 0: epoch 1 ends the second


@pytest.mark.parametrize(("line", "expected"), [
    ("loss: 0.5 acc: 0.9", {"loss": (0.5, 1.0, "line"), "acc": (0.9, 1.0, "line")}),
    ("step=40 loss=0.25", {"loss": (0.25, 40.0, "step")}),
    ("iter 7 loss 0.125 lr 1e-3", {"loss": (0.125, 7.0, "step"), "lr": (0.001, 7.0, "step")}),
    ("batch: 3 | loss: 2.5", {"loss": (2.5, 3.0, "step")}),
    ("epoch 2 step 300 loss 0.1", {"loss": (0.1, 300.0, "step")}),  # the finer x wins
    ("accuracy: 93.5%", {"accuracy": (93.5, 1.0, "line")}),
])
def test_default_pairs(line: str, expected: dict[str, tuple[float, float, str]]) -> None:
    assert values(LineParser(), line) == expected


@pytest.mark.parametrize("line", [
    "Found 6000 images belonging to 10 classes.",
    "Using 2 GPUs",
    "I1124 17:11:31.123456 1234 device_compiler.h:188] Compiled cluster using XLA!",
    "2026-11-24 17:11:31.123: I external/xla/cuda_driver.cc:152] failed call",
    '  File "/home/me/train.py", line 12, in <module>',
    "version 2.21.0 at 12:00:01",
    "done: 0 errors",
    "accuracy: 93.5% on the test set",
])
def test_prose_and_log_lines_give_nothing(line: str) -> None:
    assert LineParser().feed(line).readings == []


# Lines widely used tutorials and Keras examples print, as their authors mean them
# (issue 27): a qualifier makes another metric, prose gives nothing, "is" and markers count.
AUTHORS_LINES: list[tuple[str, dict[str, tuple[float, float, str]]]] = [
    ("Epoch 2, Loss: 0.03, Accuracy: 99.1, Test Loss: 0.21, Test Accuracy: 93.0",
     {"Loss": (0.03, 2.0, "epoch"), "Accuracy": (99.1, 2.0, "epoch"),
      "Test Loss": (0.21, 2.0, "epoch"), "Test Accuracy": (93.0, 2.0, "epoch")}),
    ("Test loss: 0.0228", {"Test loss": (0.0228, 1.0, "line")}),
    ("Number of devices: 1", {}),
    ("Accuracy after restoring the saved model without strategy: 93.4", {}),
    ("INFO:tensorflow:Using MirroredStrategy with devices "
     "('/job:localhost/replica:0/task:0/device:CPU:0',)", {}),
    ("Total params: 34,826 (136.04 KB)", {}),
    ("Finished epoch 0, accuracy is 0.49.", {"accuracy": (0.49, 0.0, "epoch")}),
    ("Final loss is 0.0957", {"loss": (0.0957, 1.0, "line")}),
    ("Train Loss: 0.4, Validation Loss: 0.5", {"Train Loss": (0.4, 1.0, "line"),
                                                "Validation Loss": (0.5, 1.0, "line")}),
]


@pytest.mark.parametrize(("line", "expected"), AUTHORS_LINES)
def test_lines_are_read_as_their_authors_mean(
        line: str, expected: dict[str, tuple[float, float, str]]) -> None:
    assert values(LineParser(), line) == expected


def test_only_the_training_loss_is_the_loss_and_said_after_an_epoch_is_at_it(
        tmp_path: Path) -> None:
    from dtgui.worker.script_env import is_loss_tag

    assert [n for n in ("Loss", "Train Loss", "training loss", "Test Loss", "Test loss",
                        "Validation Loss", "val_loss") if is_loss_tag(n)] == [
        "Loss", "Train Loss", "training loss"]
    assert metric_name("Validation Accuracy") == metric_name("val_accuracy")
    child = script_child(tmp_path)  # the tutorial's custom loop, then its evaluation
    child.output(b"Epoch 1, Loss: 0.5, Accuracy: 80.0, Test Loss: 0.9, Test Accuracy: 70.0\n"
                 b"Epoch 2, Loss: 0.03, Accuracy: 99.1, Test Loss: 0.21, Test Accuracy: 93.0\n"
                 b"Test loss: 0.25\n")
    assert child.outcome(0, "") == 0
    events = events_of(tmp_path)
    assert [(e.get("unit"), e.get("done")) for e in events if e.kind == "progress"] == [
        ("epoch", 1), ("epoch", 2)]  # numbered from 1: epoch 2 ends the second
    scalars = [(e.get("tag"), e.get("step"), e.get("axis")) for e in events
               if e.kind == "scalar"]
    assert ("Loss", 2, "epoch") in scalars and ("Test loss", 2, "epoch") in scalars
    assert next(e for e in events if e.kind == "finished").get("loss") == 0.03
    curves = RunCurves()
    curves.add_events(events)
    assert curves.final_loss() == 0.03  # the last training loss, not the test loss
    assert curves.scalars.loss_tags() == {"worker:0": "Loss"}


def test_keras_progress_lines_give_the_epoch_count_and_their_metrics() -> None:
    parser = LineParser()
    assert parser.feed("Epoch 3/10").progress == ("epoch", 2, 10)  # the third opens
    result = parser.feed("100/100 - 1s - 10ms/step - accuracy: 0.9000 - loss: 0.3000")
    assert {r.name: r.value for r in result.readings} == {"accuracy": 0.9, "loss": 0.3}
    assert parser.feed("Epoch 3/10 - loss: 0.2").progress == ("epoch", 3, 10)


def test_a_user_pattern_reads_its_lines_alone() -> None:
    parser = LineParser([IT_PATTERN])
    result = parser.feed("[it 120] loss=0.53 lr=1e-3")
    assert result.pattern == 0
    assert [(r.name, r.value, r.step, r.axis) for r in result.readings] == [
        ("loss", 0.53, 120.0, "step"), ("lr", 0.001, 120.0, "step")]
    # the defaults read it, at the step the pattern's line gave (said after step 120)
    assert values(parser, "val_loss: 0.7") == {"val_loss": (0.7, 120.0, "step")}
    assert LineParser([IT_PATTERN], defaults=False).feed("val_loss: 0.7").readings == []
    grabbing = LineParser([r"loss=(?P<loss>\S+)"])  # \S+ takes the comma after the number
    assert [r.value for r in grabbing.feed("loss=0.53, lr=1").readings] == [0.53]
    shown = preview(["[it 120] loss=0.53 lr=1e-3", "nothing here"], [IT_PATTERN])
    assert [len(r.readings) for _, r in shown] == [2, 0]


def test_patterns_that_cannot_read_are_refused_with_the_reason() -> None:
    _, problems = compile_patterns(["(unclosed", r"loss=\S+", r"(?P<step>\d+)", IT_PATTERN])
    assert len(problems) == 3
    assert "not a regular expression" in problems[0]
    assert "names no value" in problems[1] and "names no value" in problems[2]
    model = ScriptModel("/p", "t.py", patterns=("(unclosed",))
    assert any("Printed metrics: Pattern 1" in p for p in script_problems(model))


def test_one_metric_whatever_wrote_it() -> None:
    assert metric_name("train/epoch_loss") == metric_name("loss") == "loss"
    assert metric_name("validation/epoch_accuracy") == metric_name("val_accuracy")
    assert metric_name("logs/train/epoch_loss") == "loss"
    assert metric_name("lr") != metric_name("loss")


# -- the supervisor's script child ------------------------------------------------------------

def script_child(tmp_path: Path, task: str = "worker:0",
                 script: ScriptModel | None = None) -> ScriptChild:
    model = script or ScriptModel("project", "main.py")
    plan = Plan(strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2, replicas_per_task=1, steps=70,
                model=model, tasks=(TaskSpec("worker", 0), TaskSpec("worker", 1)))
    out = tmp_path / "output"
    out.mkdir(exist_ok=True)
    (tmp_path / "plan.json").write_text(plan.to_json())
    events = EventWriter(str(out / f"events-{task.replace(':', '-')}.jsonl"), task)
    return ScriptChild(plan, str(tmp_path / "plan.json"), task, str(out), events)


def events_of(tmp_path: Path, task: str = "worker-0") -> list[Event]:
    return read_all(tmp_path / "output" / f"events-{task}.jsonl")


def test_the_main_task_turns_printed_lines_into_scalars_and_progress(tmp_path: Path) -> None:
    child = script_child(tmp_path)
    text = "\n".join(["Epoch 1/3", *TUTORIAL_LINES]) + "\n"
    for piece in (text[:20], text[20:61], text[61:]):  # lines split across reads
        child.output(piece.encode())
    assert child.outcome(0, "") == 0
    events = events_of(tmp_path)
    scalars = [(e.get("tag"), e.get("step"), e.get("value"), e.get("axis"), e.get("source"))
               for e in events if e.kind == "scalar"]
    assert scalars[:2] == [("accuracy", 0, 0.327567, "epoch", "printed"),
                           ("train_loss", 0, 1.820119, "epoch", "printed")]
    assert [s[1] for s in scalars if s[0] == "train_loss"] == [0, 1, 2]
    progress = [(e.get("unit"), e.get("done"), e.get("total")) for e in events
                if e.kind == "progress"]
    assert progress == [("epoch", 0, 3), ("epoch", 1, 3), ("epoch", 2, 3), ("epoch", 3, 3)]
    finished = next(e for e in events if e.kind == "finished")
    assert finished.get("loss") == pytest.approx(1.1003)  # the last printed loss
    assert finished.get("loss_from") == "printed"


def test_a_total_the_script_prints_beats_dtgui_steps(tmp_path: Path) -> None:
    child = script_child(tmp_path)
    child.output(b"step 40/100 loss 0.3\nstep 50: loss=0.2\nstep nan: loss=0.1\n")
    assert [(e.get("unit"), e.get("done"), e.get("total")) for e in events_of(tmp_path)
            if e.kind == "progress"] == [("step", 40, 100), ("step", 50, 100)]


def test_other_tasks_are_read_only_when_asked(tmp_path: Path) -> None:
    other = script_child(tmp_path, "worker:1")
    other.output(b"loss: 0.5\n")
    assert not [e for e in events_of(tmp_path, "worker-1") if e.kind == "scalar"]
    every = script_child(tmp_path, "worker:1", ScriptModel("project", "main.py",
                                                           metrics_tasks=MetricsTasks.ALL))
    every.output(b"loss: 0.5\n")
    assert [e.get("tag") for e in events_of(tmp_path, "worker-1") if e.kind == "scalar"] == [
        "loss"]


def test_user_pattern_steps_move_the_progress_against_dtgui_steps(tmp_path: Path) -> None:
    child = script_child(tmp_path, script=ScriptModel("project", "main.py",
                                                      patterns=(IT_PATTERN,)))
    child.output(b"[it 10] loss=0.90 lr=1e-3\n[it 20] loss=0.53 lr=1e-3\n")
    events = events_of(tmp_path)
    assert [(e.get("tag"), e.get("step"), e.get("value")) for e in events
            if e.kind == "scalar"] == [("loss", 10, 0.9), ("lr", 10, 0.001),
                                       ("loss", 20, 0.53), ("lr", 20, 0.001)]
    assert [(e.get("unit"), e.get("done"), e.get("total")) for e in events
            if e.kind == "progress"] == [("step", 10, 70), ("step", 20, 70)]


# -- the reducer ------------------------------------------------------------------------------

def event(kind: str, t: float, task: str = "worker:0", **data: object) -> Event:
    return Event(kind, task, t, {"kind": kind, "task": task, "t": t, **data})


def test_a_metric_given_by_tensorboard_is_not_taken_again_from_printed_lines() -> None:
    curves = RunCurves()
    curves.add_events([
        event("started", 0.0, steps=100),
        event("scalar", 1.0, tag="loss", step=1, value=0.9, source="printed", axis="line"),
        event("scalar", 1.1, tag="lr", step=1, value=0.1, source="printed", axis="line"),
        event("scalar", 1.2, tag="train/epoch_loss", step=0, value=0.8),
        event("scalar", 1.3, task="worker:1", tag="loss", step=1, value=0.7,
              source="printed", axis="line"),
    ])
    shown = curves.scalars.snapshot()
    assert set(shown) == {"train/epoch_loss", "lr", "loss"}
    assert set(shown["loss"]) == {"worker:1"}  # worker 0 gives its loss by TensorBoard
    assert curves.final_loss() == 0.8
    assert curves.scalars.axes()["lr"] == "line"


def test_a_script_calling_report_keeps_its_steps_loss_over_a_printed_one() -> None:
    from fakes import steps_event

    curves = RunCurves()
    steps = steps_event(1, 5)
    curves.add_events([
        event("started", 0.0, steps=100),
        event("scalar", 1.0, tag="loss", step=1, value=9.0, source="printed", axis="line"),
        steps,
        event("scalar", 7.0, tag="acc", step=2, value=0.5, source="printed", axis="line"),
        event("finished", 8.0, loss=9.0, loss_from="printed"),
    ])
    assert set(curves.scalars.snapshot()) == {"acc"}  # its loss is the steps' (report())
    assert curves.final_loss() == pytest.approx(steps.get("loss"))


def test_printed_losses_give_the_final_loss_and_the_epoch_progress() -> None:
    curves = RunCurves()
    events = [event("started", 0.0, steps=100)]
    for epoch, line in enumerate(TUTORIAL_LINES):
        loss = float(line.split("train_loss: ")[1].rstrip("."))
        events += [event("scalar", 10.0 + 10 * epoch, tag="train_loss", step=epoch, value=loss,
                         source="printed", axis="epoch"),
                   event("progress", 10.0 + 10 * epoch, unit="epoch", done=epoch + 1,
                         total=5)]
    curves.add_events(events)
    assert curves.final_loss() == pytest.approx(1.1003)
    progress = curves.script_progress
    assert (progress.unit, progress.done, progress.total) == ("epoch", 3, 5)
    assert progress.seconds_left() == pytest.approx(20.0)  # 30 s for 3 epochs: 2 left
    assert progress.text() == "3 / 5 epochs"
    assert curves.loss_curve().steps.tolist() == [0, 1, 2]


# -- the honest words -------------------------------------------------------------------------

def test_a_script_plan_says_what_runs_and_what_does_not_apply() -> None:
    model = ScriptModel("/proj", "main.py", ("--epochs", "3"), {"DATA": "/d"}, True,
                        patterns=(IT_PATTERN,))
    plan = Plan(strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2, model=model)
    assert script_summary(plan) == "script main.py --epochs 3 · tf_keras"
    rows = dict(script_rows(plan))
    assert rows["Environment"] == "DATA=/d"
    assert "TF_USE_LEGACY_KERAS=1" in rows["Keras"]
    assert "DTGUI_STEPS=100" in rows["Passed to it"]
    assert "1 pattern" in rows["Metrics"]
    assert all(w in rows["Not applying"] for w in ("steps", "optimizer", "validation",
                                                    "checkpoints"))
    assert "Keras 3" in dict(script_rows(plan.with_changes(
        model=replace(model, legacy_keras=False))))["Keras"]
    assert "Adam" not in script_text(plan)
    assert script_rows(Plan()) == []


# -- Keras 2 names under Keras 3 --------------------------------------------------------------

def tutorial_plan(legacy: bool) -> Plan:
    model = ScriptModel(str(PROJECTS / "mwm_custom_loop"), "main.py", legacy_keras=legacy)
    return Plan(strategy=Strategy.MULTI_WORKER_MIRRORED, workers=2, model=model)


def test_keras2_calls_are_warned_of_under_keras3_with_the_fix() -> None:
    found = study(tutorial_plan(legacy=False))
    assert found is not None and not found.refusal  # a warning, not a refusal
    [warning] = found.warnings
    assert "Metric.reset_states at main.py:" in warning and "reset_state()" in warning
    assert "legacy Keras" in warning
    legacy = study(tutorial_plan(legacy=True))
    assert legacy is not None and legacy.warnings == []


def test_a_plan_json_keeps_the_printed_metrics_fields(tmp_path: Path) -> None:
    model = ScriptModel("/p", "t.py", printed_metrics=False, patterns=(IT_PATTERN,),
                        metrics_tasks=MetricsTasks.ALL)
    plan = Plan(model=model)
    back = Plan.from_dict(json.loads(plan.to_json())).script
    assert back == model


def test_compare_shows_a_script_run_by_what_it_printed(tmp_path: Path) -> None:
    from dtgui.core.runs.compare import FIELDS, MISSING, summarize_run, table_rows

    child = script_child(tmp_path)
    (tmp_path / "plan.json").write_text(child.plan.to_json())
    child.output("\n".join(TUTORIAL_LINES).encode() + b"\n")
    child.outcome(0, "")
    summary = summarize_run(tmp_path)
    assert summary.final_loss == pytest.approx(1.1003)
    assert summary.optimizer == summary.schedule == "the script's own"
    assert summary.loss.steps.tolist() == [0, 1, 2]
    [row] = table_rows([summary])
    shown = dict(zip(FIELDS, row, strict=True))
    assert shown["Optimizer"] == "the script's own" and shown["Steps"] == MISSING
    assert shown["Final loss"] == "1.1"


def test_sample_lines_come_from_the_last_run_of_this_very_script(tmp_path: Path) -> None:
    import os

    from dtgui.core.scripts.script_samples import last_run_output

    def run(name: str, source: str, printed: str, created: float) -> None:
        bundle = tmp_path / "runs" / name
        (bundle / "project").mkdir(parents=True)
        (bundle / "project" / "main.py").write_text(source)
        (bundle / "output" / "logs").mkdir(parents=True)
        (bundle / "output" / "logs" / "worker-0.log").write_text(printed)
        plan = Plan(run_name=name, model=ScriptModel("project", "main.py"))
        (bundle / "plan.json").write_text(plan.to_json())
        os.utime(bundle / "plan.json", (created, created))

    run("mine", "print('mine')\n", "starting\nloss: 1.0\n", 100.0)
    run("other", "print('another project')\n", "loss: 9.0\n", 200.0)  # newer
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.py").write_text("print('mine')\n")
    assert last_run_output("main.py", tmp_path / "runs", project=project) == (
        ["starting", "loss: 1.0"], "mine")
    assert last_run_output("main.py", tmp_path / "runs") == (["loss: 9.0"], "other")
    assert last_run_output("train.py", tmp_path / "runs") == ([], "")


# -- devices and imports before launch --------------------------------------------------------

DEVICES_LINES = ("cpus = tf.config.list_physical_devices('CPU')\n"
                 "tf.config.set_logical_device_configuration(cpus[0], [None, None])\n")


def test_fewer_devices_than_replicas_is_warned_of_with_the_lines_that_make_them(
        tmp_path: Path) -> None:
    (tmp_path / "main.py").write_text("import tensorflow as tf\n"
                                      "strategy = tf.distribute.MirroredStrategy()\n")
    mirrored = Plan(strategy=Strategy.MIRRORED, replicas_per_task=2,
                    model=ScriptModel(str(tmp_path), "main.py"))
    found = study(mirrored)
    assert found is not None
    [warning] = found.warnings
    assert "MirroredStrategy would train 1 replica while dtgui records 2" in warning
    assert "set_logical_device_configuration" in warning and "DTGUI_REPLICAS_PER_TASK" in warning
    for plan in (mirrored.with_changes(replicas_per_task=1),
                 mirrored.with_changes(strategy=Strategy.ONE_DEVICE, replicas_per_task=1)):
        studied = study(plan)
        assert studied is not None and studied.warnings == []
    (tmp_path / "main.py").write_text("import tensorflow as tf\n" + DEVICES_LINES)
    studied = study(mirrored)
    assert studied is not None and studied.warnings == []  # it makes them


def test_dtgui_run_checks_a_bundle_s_imports_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dtgui.cli import main

    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("import dtgui_test_absent_module\nprint('loss: 1')\n")
    out = tmp_path / "bundle"
    assert main(["export", str(out), "--strategy", "mirrored", "--replicas", "2",
                 "--script", str(project / "train.py")]) == 0
    assert "MirroredStrategy would train 1 replica" in capsys.readouterr().err
    assert main(["run", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the script imports dtgui_test_absent_module" in err
    assert "-m pip install dtgui_test_absent_module" in err
    assert not list((out / "output").glob("events-*.jsonl"))  # no task started


def test_a_failed_run_names_its_last_loss_so_and_keeps_its_whole_exception(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dtgui.cli import main

    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(
        "print('Epoch 1, Loss: 0.5, Test Loss: 0.9', flush=True)\n"
        "raise TypeError('Failed to convert elements of PerReplica:{\\n  0: 1,\\n  1: 2\\n}) '\n"
        "                'with an unsupported type to a Tensor.')\n")
    out = tmp_path / "bundle"
    assert main(["export", str(out), "--strategy", "one_device", "--replicas", "1",
                 "--script", str(project / "train.py")]) == 0
    capsys.readouterr()
    assert main(["run", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "last loss before the failure 0.5" in printed and "final loss" not in printed
    assert "TypeError: Failed to convert elements of PerReplica:{ 0: 1, 1: 2 }) with an " \
        "unsupported type to a Tensor." in printed
