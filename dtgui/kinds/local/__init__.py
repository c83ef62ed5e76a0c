"""This machine as a kind of target: a run's tasks are processes started here."""

from dtgui.kinds import Kind

TARGET_KIND = Kind(name="local", driver="dtgui.kinds.local.driver:LocalDriver",
                   over_ssh=False)
