"""The Slurm cluster kind: a run's tasks are one batch job, submitted at the cluster's login
node (this machine, or a registered machine over SSH) and placed by Slurm (docs/slurm.md).

One package holds all of it, each module in its layer (tests/test_layers.py): the job, its
batch script and the checks (`job`), what Slurm's commands answer (`answers`), the bundle's
job files (`batch_bundle`), the task program's part on the nodes (`task`, copied into the
bundle), the commands on the login node (`remote`), the executors (`executor`,
`executor_ssh`), the driver (`driver`), the wizard's box (`box`), the Add-machine dialog's
fields and the Machines panel's lines (`fields`), the command-line options (`cli`).
"""

from dtgui.kinds import Kind

TARGET_KIND = Kind(
    name="slurm",
    driver="dtgui.kinds.slurm.driver:SlurmDriver",
    box="dtgui.kinds.slurm.box:SlurmBox",
    fields="dtgui.kinds.slurm.fields:SlurmFields",
    options="dtgui.kinds.slurm.cli:SlurmOptions",
    settings="dtgui.kinds.slurm.job:SlurmDefaults.from_dict",
    machine_title="Slurm cluster (this machine is its login node)",
)
