"""Files written before kinds were plugins load as they did: machines.toml (a cluster told by
its `slurm` table, a plain machine by having none), run records without a machine's kind,
sweep.json's trial job; and a machine of a kind that is not installed keeps what was written.
"""

from __future__ import annotations

from pathlib import Path

from dtgui.core.machines.registry import PLAIN_KIND, Machine, MachineRegistry
from dtgui.core.runs.records import MachineRecord
from dtgui.kinds.slurm.job import SlurmDefaults
from dtgui.launch.drivers import recorded_kind, target_of_record

OLD_MACHINES = """schema = 1

[[machines]]
name = "box"
host = "10.0.0.7"
user = "me"

[[machines]]
name = "hpc"
host = "login.example.org"
user = "me"
python = "python"

[machines.slurm]
partition = "gpu"
time_limit = "04:00:00"
modules = ["cuda/12.2"]

[[machines]]
name = "farm"
host = "farm.example.org"
user = "me"
kind = "farm"

[machines.farm]
slots = 8
"""


def test_an_older_machine_list_loads_each_machine_as_its_kind(tmp_path: Path) -> None:
    path = tmp_path / "machines.toml"
    path.write_text(OLD_MACHINES, encoding="utf-8")
    registry = MachineRegistry(path)
    assert registry.message == ""
    box, hpc, farm = registry.machines()
    assert (box.kind, box.settings) == (PLAIN_KIND, None)
    assert hpc.kind == "slurm" and hpc.settings == SlurmDefaults(
        partition="gpu", time_limit="04:00:00", modules=("cuda/12.2",))
    # a kind that is not installed: the machine is kept with its table as written
    assert farm.kind == "farm" and farm.settings is not None
    assert farm.settings.to_dict() == {"slots": 8}
    registry.save()
    again = MachineRegistry(path)
    assert again.machines() == registry.machines()
    assert "[machines.slurm]" in path.read_text() and "slots = 8" in path.read_text()
    assert "kind" not in again.to_toml().split("[[machines]]")[1]  # a plain machine: no kind


def test_records_without_a_kind_are_told_by_their_fields() -> None:
    hpc = Machine("hpc", "login.example.org", user="me", kind="slurm",
                  settings=SlurmDefaults())
    old_slurm = MachineRecord("hpc", "/home/me/dtgui-runs/r", "python", "",
                              hpc.to_dict(), job_id="42")
    old_local = MachineRecord("local", "/runs/r")
    old_ssh = MachineRecord("box", "/home/me/.cache/dtgui/runs/r/box", "python3", "10.0.0.7",
                            Machine("box", "10.0.0.7", user="me").to_dict())
    assert [recorded_kind(r) for r in (old_slurm, old_local, old_ssh)] == \
        ["slurm", "local", "ssh"]
    assert target_of_record(old_ssh).machine == Machine("box", "10.0.0.7", user="me")
    assert target_of_record(old_slurm).kind == "slurm"


def test_an_older_sweep_files_trial_job_is_read_by_its_kind(tmp_path: Path) -> None:
    from dtgui.core.plans.plan import Plan
    from dtgui.core.sweeps.sweep import SweepSpec, load_sweep, parse_param, save_sweep
    from dtgui.kinds.slurm.job import SlurmJob
    from dtgui.launch.drivers import job_readers

    job = SlurmJob(cluster="hpc", nodes=2, tasks_per_node=1)
    spec = SweepSpec(params=(parse_param("lr=loguniform:1e-4:1e-1"),), job=job)
    save_sweep(tmp_path, spec, Plan(workers=2))
    text = (tmp_path / "sweep.json").read_text()
    assert '"kind": "slurm"' in text  # as sweep.json always kept it
    assert load_sweep(tmp_path, job_readers())[0].job == job
