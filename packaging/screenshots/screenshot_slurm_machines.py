"""Save a PNG of the Machines panel with a registered Slurm cluster and an SSH machine.

    xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python packaging/screenshots/screenshot_slurm_machines.py OUT [WIDTH]

The cluster's facts are what its probe reads from Slurm 22.05's own `sinfo` and `squeue`
output (the texts below), set on the panel as a finished probe sets them: no cluster or SSH
host is needed. The real probe is tested in tests/test_slurm_gui.py. Everything happens in a
temporary config directory.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import shots

TMP = Path(tempfile.mkdtemp(prefix="dtgui-shots-"))
os.environ["DTGUI_CONFIG_DIR"] = str(TMP / "config")


from dtgui.core.machines.registry import Machine, MachineRegistry, RemoteFacts  # noqa: E402
from dtgui.core.slurm import SlurmDefaults  # noqa: E402
from dtgui.core.slurm_answers import ClusterFacts, parse_sinfo, parse_squeue  # noqa: E402
from dtgui.ui.app import make_app  # noqa: E402
from dtgui.ui.machines.panel import MachinesPanel  # noqa: E402

SINFO = ("gpu*|up|3|mixed|64|512000|gpu:a100:4(S:0-1)|2-00:00:00\n"
         "gpu*|up|1|drained*|64|512000|gpu:a100:4(S:0-1)|2-00:00:00\n"
         "debug|up|2|idle|16|64000|(null)|1:00:00\n")
SQUEUE = ("4812|gpu|mnist-mwms|RUNNING|None|2026-11-24T20:41:07|12:31|4:00:00|2\n"
          "4830|gpu|resnet-sweep|PENDING|Resources|2026-11-24T22:10:00|0:00|4:00:00|4\n")


def main(argv: list[str]) -> int:
    out = Path(argv[1] if len(argv) > 1 else ".")
    out.mkdir(parents=True, exist_ok=True)
    app = make_app([])
    registry = MachineRegistry(TMP / "config" / "machines.toml")
    registry.add(Machine("hpc", "login.hpc.example.org", user="me", auth="agent",
                         python="python",
                         slurm=SlurmDefaults(partition="gpu", time_limit="04:00:00")))
    registry.add(Machine("box", "10.0.0.12", user="me", auth="agent"))
    panel = MachinesPanel(registry=registry)
    panel.resize(int(argv[2]) if len(argv) > 2 else 760, 560)
    panel.show()
    shots.settle(app, 0.5)
    cluster = ClusterFacts("22.05.8", parse_sinfo(SINFO), parse_squeue(SQUEUE))
    panel.set_state("hpc", "ok", "", RemoteFacts(
        hostname="login1", os_name="Rocky Linux 9.3 (Blue Onyx)", kernel="Linux 5.14.0",
        arch="x86_64", cpu_cores=32, ram_total=256 * 2**30, python_command="python",
        python_path="/usr/bin/python", python_version="3.11.5", cluster=cluster))
    panel.set_state("box", "ok", "", RemoteFacts(
        hostname="box", os_name="Debian GNU/Linux 12 (bookworm)", kernel="Linux 6.1.0",
        arch="x86_64", cpu_cores=16, ram_total=64 * 2**30, python_path="/usr/bin/python3",
        python_version="3.11.2", tf_version="2.17.0"))
    panel.table.selectRow(panel.row_of("hpc"))
    shots.settle(app, 0.5)
    return 0 if shots.save(app, panel, out / "slurm_machines.png") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
