"""Remote machines in the GUI: the machines panel, its dialogs and the cluster doctor."""

from dtgui.ui.machines.panel import MachinesPanel

__all__ = ["MachinesPanel"]
