"""A pool: a folder on this machine that takes whole runs, as a scheduler's queue would.

A registered machine of the kind "pool" names the folder (its settings); a run sent to the
pool is a job there: its bundle is copied into the pool's folder (`<folder>/<run id>`) and
its tasks run from that copy as this machine's processes. A test kind of target, shipped as
its own distribution with every hook a kind has: its driver, wizard box, Add-machine fields,
command-line options (`--pool NAME`), machine settings, its part of the task program.
"""

from dtgui.kinds import Kind

TARGET_KIND = Kind(
    name="pool",
    driver="dtgui_pool.driver:PoolDriver",
    box="dtgui_pool.box:PoolBox",
    fields="dtgui_pool.fields:PoolFields",
    options="dtgui_pool.cli:PoolOptions",
    settings="dtgui_pool.job:PoolSettings.from_dict",
    over_ssh=False,  # a folder of this machine: nothing to connect to
)
