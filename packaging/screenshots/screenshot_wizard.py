"""Save a PNG of every page of the run wizard (and a few states) into a directory.

    xvfb-run -a -s "-screen 0 1400x900x24" .venv/bin/python packaging/screenshots/screenshot_wizard.py /tmp/wiz

No TensorFlow is started: the model-file results are shown as the check would report them.
"""

from __future__ import annotations

import sys

import shots

shots.use_checkout()

from dtgui.core.machines.hardware import GpuInfo, MachineFacts, TfView  # noqa: E402
from dtgui.core.plans.plan import Plan  # noqa: E402
from dtgui.launch.checks.model_check import ModelCheck  # noqa: E402
from dtgui.ui.app import make_app  # noqa: E402
from dtgui.ui.wizard import RunWizard  # noqa: E402

BROKEN_TRACEBACK = """Traceback (most recent call last):
  File "/home/me/models/broken_model.py", line 12, in build_model
    raise ValueError("no layers configured")
ValueError: no layers configured
"""


def cpu_facts() -> MachineFacts:
    return MachineFacts(hostname="devbox", os_name="Linux 6.1", python="3.11.2",
                        cpu_model="Intel(R) Xeon(R) CPU", cpu_cores=2, ram_total=8 << 30,
                        tf=TfView(version="2.21.0"))


def gpu_facts() -> MachineFacts:
    gpus = [GpuInfo(i, "NVIDIA RTX A4000", 16 << 30, 1 << 30, 3.0, "550.54", "8.6")
            for i in range(2)]
    return MachineFacts(hostname="gpubox", os_name="Linux 6.1", python="3.11.2",
                        cpu_model="AMD EPYC", cpu_cores=16, ram_total=64 << 30, gpus=gpus,
                        tf=TfView(version="2.21.0", gpus=("GPU:0", "GPU:1"), built_with_cuda=True))


def main(argv: list[str]) -> int:
    out = shots.out_dir(argv)
    if out is None:
        return 2
    app = make_app(argv[:1])  # the app's theme, exactly as dtgui starts

    wizard = RunWizard(cpu_facts())
    wizard.show()
    shots.shoot(app, wizard, out, "1-strategy")
    wizard.next()
    shots.shoot(app, wizard, out, "2-options")
    wizard.next()
    shots.shoot(app, wizard, out, "3-model-demo")
    wizard.next()
    shots.shoot(app, wizard, out, "4-review-mirrored")
    wizard.close()

    # Parameter server with 2 workers + 1 ps: four processes in the review.
    wizard = RunWizard(cpu_facts(), Plan(run_name="ps-demo", strategy="parameter_server",
                                         replicas_per_task=1, workers=2, parameter_servers=1))
    wizard.show()
    shots.shoot(app, wizard, out, "1b-strategy-parameter-server")
    for _ in range(3):
        wizard.next()
    wizard.review_page.task_list.setCurrentRow(1)
    shots.shoot(app, wizard, out, "4b-review-parameter-server-tfconfig")
    wizard.review_page.tabs.setCurrentIndex(1)
    shots.shoot(app, wizard, out, "4c-review-parameter-server-script")
    wizard.close()

    # ParameterServer chosen afresh: deterministic ops go off, the reason on hover.
    wizard = RunWizard(cpu_facts())
    wizard.show()
    wizard.strategy_page.select_strategy("parameter_server")
    wizard.next()
    shots.shoot(app, wizard, out, "2c-options-parameter-server")
    wizard.close()

    # TPU with no address: refused on page 1.
    wizard = RunWizard(cpu_facts())
    wizard.show()
    wizard.strategy_page.select_strategy("tpu")
    shots.shoot(app, wizard, out, "1c-strategy-tpu-no-address")
    wizard.close()

    # A GPU machine, options with an invalid learning rate and name.
    wizard = RunWizard(gpu_facts(), Plan(strategy="mirrored", device_kind="gpu",
                                         replicas_per_task=2, precision="mixed_float16"))
    wizard.show()
    shots.shoot(app, wizard, out, "1d-strategy-gpu-machine")
    wizard.next()
    wizard.options_page.lr_edit.setText("0")
    wizard.options_page.run_name_edit.setText("my run; rm -rf /")
    shots.shoot(app, wizard, out, "2b-options-gpu-invalid")
    wizard.close()

    # The model page with a file: checking, passed, failed (results as the check reports them).
    wizard = RunWizard(cpu_facts())
    wizard.show()
    wizard.next()
    wizard.next()
    page = wizard.model_page
    page.file_radio.setChecked(True)
    page.path_edit.setText("/home/me/models/good_model.py")
    page._checking = page.path()
    page._show_state()
    shots.shoot(app, wizard, out, "3b-model-checking")
    page._on_result(page._generation, page.path(), ModelCheck(
        True, summary="1797 examples, input (64,), output (10,)"))
    shots.shoot(app, wizard, out, "3c-model-passed")
    page.path_edit.setText("/home/me/models/broken_model.py")
    page._on_result(page._generation, page.path(), ModelCheck(
        False, "Your model file raised ValueError in build_model(): no layers configured",
        BROKEN_TRACEBACK))
    shots.shoot(app, wizard, out, "3d-model-failed")
    page.details_button.setChecked(True)
    shots.shoot(app, wizard, out, "3e-model-failed-details")
    wizard.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
