"""Finished runs written the way the training program writes them (without TensorFlow).

`write_run` renders a real bundle (render_bundle) and writes its events with the training
program's own `EventWriter` and step codec: `started`, one `steps` event per training call
(compact losses and means, `lr`), `epoch` with metrics, `validation`, `checkpoint`,
`model_saved` and `finished` with its timeline. Event times come from a clock that advances
`seconds_per_step` a step, so wall-time curves look like a real run's.
"""

from __future__ import annotations

import contextlib
import json
import math
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

import dtgui.worker.events as worker_events
from dtgui.core.bundles.bundle import render_bundle
from dtgui.core.plans.placement import place_local
from dtgui.core.plans.plan import Plan
from dtgui.core.plans.strategies import Strategy
from dtgui.core.runs.records import RunRecord
from dtgui.core.runs.run_state import RunState
from dtgui.worker import step_batch
from dtgui.worker.events import EventWriter

T0 = 1_790_000_000.0
AGAIN_SHIFT = 1.0  # how much higher the steps trained again after a restart are


@contextlib.contextmanager
def clock(start: float) -> Iterator[list[float]]:
    """EventWriter's time.time() reads `now[0]` while inside."""
    now = [start]
    with mock.patch.object(worker_events, "time", types.SimpleNamespace(time=lambda: now[0])):
        yield now


def train_loss(step: int, rate: float, floor: float) -> float:
    return floor + 2.2 * math.exp(-step * rate)


def write_run(root: Path, name: str, *, replicas: int = 2, steps: int = 120,
              steps_per_call: int = 10, steps_per_epoch: int = 40, rate: float = 0.03,
              floor: float = 0.15, seconds_per_step: float = 0.05, examples_per_sec: float = 1200,
              plan_fields: dict[str, Any] | None = None, drop_fields: tuple[str, ...] = (),
              validation: bool = True, lr: float = 0.01, created: float = T0,
              seed: int = 0, overfit_from: int = 3, overfit: float = 0.1,
              warmup: int = 0, save_best: bool = False,
              restart: tuple[int, int] | None = None) -> RunRecord:
    """A finished run under `root/name`, with its run record. `restart` (crashed after step,
    resumed from step): the task trained to the first, restarted from the checkpoint of the
    second and trained the steps after it again (their losses and validation AGAIN_SHIFT
    higher, so that a reader shows which pass it kept)."""
    plan = place_local(Plan(run_name=name, strategy=Strategy.MIRRORED if replicas > 1
                            else Strategy.ONE_DEVICE,
                            replicas_per_task=replicas, steps=steps,
                            steps_per_epoch=steps_per_epoch, learning_rate=lr))
    bundle = render_bundle(plan, root / name)
    data = json.loads((bundle.path / "plan.json").read_text())
    data.update(plan_fields or {})
    for key in drop_fields:
        data.pop(key, None)
    (bundle.path / "plan.json").write_text(json.dumps(data, indent=2) + "\n")
    rng = np.random.default_rng(seed)
    ids = list(range(replicas))
    timeline: list[list[float]] = []
    best = math.inf
    with clock(created) as now, EventWriter(bundle.events_file(plan.tasks[0]), "worker:0") as ev:
        ev.emit("started", replicas=replicas, replica_ids=ids, devices=["/cpu:0"] * replicas,
                strategy=plan.strategy, global_batch=plan.global_batch, steps=steps,
                versions={"python": "3.11"}, pid=1, host="localhost", resumed_from_step=0)
        now[0] += 2.0  # building the model and tracing
        begin = now[0]
        passes = [(1, steps, 0.0)]
        if restart is not None:
            crashed, resumed = restart
            passes = [(1, crashed, 0.0), (resumed + 1, steps, AGAIN_SHIFT)]
        calls = [(first, min(steps_per_call, end - first + 1), shift)
                 for start, end, shift in passes
                 for first in range(start, end + 1, steps_per_call)]
        for first, count, shift in calls:
            if restart is not None and first == restart[1] + 1 and shift:
                now[0] += 5.0  # the restart
                ev.emit("started", replicas=replicas, replica_ids=ids,
                        devices=["/cpu:0"] * replicas, strategy=plan.strategy,
                        global_batch=plan.global_batch, steps=steps,
                        versions={"python": "3.11"}, pid=2, host="localhost",
                        resumed_from_step=restart[1])
            rows = np.arange(first, first + count)
            base = np.array([train_loss(int(s), rate, floor) + shift for s in rows])
            losses = (base[:, None] + rng.normal(0, 0.05, (count, replicas))).astype(np.float32)
            now[0] += count * seconds_per_step
            at = first + count - 1
            step_lr = (lr * at / warmup if at < warmup else
                       lr * 0.5 * (1 + math.cos(math.pi * (at - warmup) / (steps - warmup))))
            ev.emit("steps", first=first, count=count, stride=1,
                    epoch=(first + count - 2) // steps_per_epoch + 1, replica_ids=ids,
                    encoding=step_batch.ENCODING, losses=step_batch.encode(losses),
                    means=step_batch.encode(losses.mean(axis=1)),
                    loss=float(losses.mean(axis=1)[-1]), examples_per_sec=examples_per_sec,
                    lr=step_lr)
            last = first + count - 1
            timeline.append([last, round(now[0] - begin, 3)])
            if last % steps_per_epoch == 0:
                epoch = last // steps_per_epoch
                train_acc = 1.0 - 0.4 * float(base[-1])
                ev.emit("epoch", epoch=epoch, loss=float(base[-1]), accuracy=train_acc,
                        steps=last, metrics={"accuracy": train_acc})
                if validation:
                    now[0] += 0.4
                    # it overfits from `overfit_from` on: the validation loss rises again
                    worse = overfit * max(0, epoch - overfit_from + 1)
                    val = float(train_loss(last, rate, floor) + 0.08 + worse + shift)
                    ev.emit("validation", step=last, epoch=epoch, loss=val,
                            metrics={"accuracy": 1.0 - 0.45 * val,
                                     "top_5": min(0.995, 0.9 + 0.02 * epoch)},
                            examples=360)
                    if save_best and val < best:
                        best = val
                        ev.emit("model_saved", role="best", path="model/best/model.keras",
                                savedmodel="model/best/saved_model", step=last,
                                metric="val_loss", value=val)
                ev.emit("checkpoint", step=last, path=f"output/checkpoints/ckpt-{epoch}")
        if validation:
            ev.emit("model_saved", role="final", path="model/model.keras",
                    savedmodel="model/saved_model", step=steps)
        ev.emit("finished", steps=steps, loss=float(losses.mean(axis=1)[-1]),
                seconds=round(now[0] - begin, 3), timeline=timeline)
    record = RunRecord(f"{name}-{seed:06d}", name, str(bundle.path), plan.strategy,
                       created=created, state=RunState.FINISHED, ended=now[0],
                       final_loss=float(losses.mean(axis=1)[-1]))
    record.save()
    return record
