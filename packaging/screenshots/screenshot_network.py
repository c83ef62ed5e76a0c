"""Save a PNG of the cluster doctor measuring the links between three real SSH test hosts,
two of whose links are slowed with tc (h2 <-> h3 to 100 Mbit/s both ways, h2 -> h4 to 400 Mbit/s
one way only: the doctor calls that direction out).

    xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python packaging/screenshots/screenshot_network.py out.png

Needs root (tests/sshhosts.py: sshd test hosts in network namespaces) and tc (iproute2).
Everything happens in temporary directories (config, data, HOME, keyring file).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import shots

shots.sandbox()

import netfaults  # noqa: E402
import remote_python  # noqa: E402
import sshhosts  # noqa: E402
from conftest_ssh import machine, trust  # noqa: E402

from dtgui.core.machines.hardware import TfView, detect_local  # noqa: E402
from dtgui.core.machines.registry import MachineRegistry  # noqa: E402
from dtgui.ui.app import make_app  # noqa: E402
from dtgui.ui.machines.doctor_dialog import DoctorDialog  # noqa: E402


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "net_doctor.png")
    app = make_app(sys.argv[:1])
    lab = sshhosts.SshLab(3).start()
    try:
        h2, h3, h4 = lab.hosts
        trust(h2, h3, h4)
        registry = MachineRegistry()
        python = remote_python.python_for()  # this machine's TensorFlow, for the test account
        for h in (h2, h3, h4):
            registry.add(machine(lab, h, python=python))
        local = detect_local()
        local = type(local)(**{**vars(local), "tf": TfView(version="2.21.0")})
        with contextlib.ExitStack() as shaped:
            shaped.enter_context(netfaults.throttled(h2, {h3.address: 100, h4.address: 400}))
            shaped.enter_context(netfaults.throttled(h3, {h2.address: 100}))
            doctor = DoctorDialog(registry, local)
            doctor.resize(1500, 860)
            doctor.show()
            done: list[object] = []
            doctor.finishedRun.connect(done.append)
            doctor.run()
            shots.wait_for(app, lambda: done, 180)
        doctor.table.scrollToBottom()
        shots.settle(app, 0.3)
        ok = shots.save(app, doctor, out)
        if not done:
            print("the doctor did not finish")
        for check in doctor.checks:
            if check.topic.startswith("Link"):
                print(check.machine, check.status, check.detail)
        return 0 if ok and done else 1
    finally:
        remote_python.cleanup()
        lab.stop()


if __name__ == "__main__":
    sys.exit(main())
