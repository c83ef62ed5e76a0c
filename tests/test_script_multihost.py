"""A user's own model.fit script (TensorFlow's multi-worker Keras tutorial, with tf_keras) on
two SSH test hosts in network namespaces: its TensorBoard curves and both machines' devices
arrive live, and Stop leaves no process anywhere."""

from __future__ import annotations

import time
from pathlib import Path

import conftest_ssh
import pytest
from fakes import wait_for
from test_multihost import Lab, lab, lab_python, nothing_left  # noqa: F401

from dtgui.core.cluster import assign
from dtgui.core.plan import Plan
from dtgui.core.script import ScriptModel

pytestmark = pytest.mark.slow
ssh_lab = conftest_ssh.ssh_lab
ssh_env = conftest_ssh.ssh_env
real_keyring = conftest_ssh.real_keyring
PROJECT = Path(__file__).resolve().parent / "script_projects" / "mwm_fit"


def test_keras_fit_script_on_two_hosts_live_curves_then_stop(lab: Lab, qtbot) -> None:  # noqa: F811
    from dtgui.ui.dashboard import Dashboard

    model = ScriptModel(str(PROJECT), "main.py", ("1000", "4"), legacy_keras=True).to_dict()
    plan = Plan(run_name="script-2hosts", strategy="multi_worker_mirrored", workers=2,
                replicas_per_task=1, checkpoint_every=0, model=model)
    controller = lab.launch(plan, assign(plan, machines=["h2", "h3"]))
    dashboard = Dashboard()
    qtbot.addWidget(dashboard)
    dashboard.attach(controller)

    def both_hosts_plotted() -> bool:
        series = controller.metrics.scalars.snapshot().get("train/epoch_loss", {})
        return len(series) == 2 and all(len(x) >= 3 for x, _ in series.values())

    started = time.monotonic()
    wait_for(lambda: both_hosts_plotted() or controller.finished, 240,
             "no curve from both hosts")
    assert not controller.finished, controller.message  # live, while it trains
    print(f"curves from both hosts after {time.monotonic() - started:.1f} s")
    snap = controller.metrics.snapshot()
    assert {t: s.machine for t, s in snap.tasks.items()} == {"worker:0": "h2", "worker:1": "h3"}
    assert {"h2 cpu0", "h3 cpu0"} <= set(snap.device_util)  # both machines' devices
    notes = [line for line in controller.metrics.log_lines("worker:0") if "[dtgui]" in line]
    assert any("h2: the script gets tf_keras 2.21" in n for n in notes), notes
    qtbot.waitUntil(lambda: dashboard.scalar_panel.tag == "train/epoch_loss", timeout=5000)
    assert sorted(dashboard.scalar_panel.curves.curves) == ["worker:0", "worker:1"]

    controller.request_stop()
    assert controller.wait(60), "the stop did not end the run"
    assert controller.state == "stopped", controller.message
    nothing_left(controller)
    controller.detach()
