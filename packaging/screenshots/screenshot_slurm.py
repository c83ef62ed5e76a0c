"""Save PNGs of the wizard's Slurm target: the review page with a registered cluster chosen
(its defaults filled in, the batch script dtgui submits), and the same page with a bad value.

    xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python packaging/screenshots/screenshot_slurm.py OUT

Nothing is submitted and no cluster is needed. The dashboard of a pending job is taken on a
real Slurm by tests/test_slurm_gui.py with DTGUI_SCREENSHOT_DIR set.
"""

from __future__ import annotations

import sys

import shots

shots.use_checkout()

from dtgui.core.machines.hardware import MachineFacts, TfView  # noqa: E402
from dtgui.core.machines.registry import Machine  # noqa: E402
from dtgui.core.plans.plan import Plan  # noqa: E402
from dtgui.core.slurm import SlurmDefaults  # noqa: E402
from dtgui.ui.app import make_app  # noqa: E402
from dtgui.ui.wizard import RunWizard  # noqa: E402
from dtgui.ui.wizard.slurm_box import SlurmBox  # noqa: E402

CLUSTER = Machine("hpc", "login.hpc.example.org", user="me", auth="agent",
                  python="python",
                  slurm=SlurmDefaults(partition="gpu", account="lab", time_limit="04:00:00",
                                      gpus_per_node=4, modules=("cuda/12.2",),
                                      venv="~/envs/tf"))
BOX = Machine("gpu-box", "10.0.0.7", user="me", auth="agent")


def main(argv: list[str]) -> int:
    out = shots.out_dir(argv)
    if out is None:
        return 2
    app = make_app(argv[:1])
    facts = MachineFacts(hostname="laptop", os_name="Linux 6.1", python="3.11.2",
                         cpu_model="Intel(R) Core(TM) i7", cpu_cores=8, ram_total=16 << 30,
                         tf=TfView(version="2.21.0"))
    wizard = RunWizard(facts, Plan(run_name="resnet-on-hpc", strategy="multi_worker_mirrored",
                                   workers=2, checkpoint_every=500))
    wizard.resize(1100, 900)
    wizard.set_machines([BOX, CLUSTER])
    wizard.show()
    for _ in range(3):
        wizard.next()
    box = wizard.review_page.machines_box
    box.radios[SlurmBox.kind].setChecked(True)
    slurm = box.boxes[SlurmBox.kind]
    assert isinstance(slurm, SlurmBox)
    slurm.tasks_spin.setValue(2)
    slurm.gpus_spin.setValue(2)
    shots.shoot(app, wizard, out, "slurm_wizard_review", rounds=10)
    wizard.review_page.task_list.setCurrentRow(3)
    wizard.review_page.tabs.setCurrentIndex(0)
    shots.shoot(app, wizard, out, "slurm_wizard_tf_config", rounds=10)
    wizard.review_page.tabs.setCurrentIndex(2)
    slurm.time_edit.setText("two hours")
    shots.shoot(app, wizard, out, "slurm_wizard_bad_value", rounds=10)
    wizard.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
