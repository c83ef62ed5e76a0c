"""Comparing finished runs (Runs page → select several → Compare)."""

from dtgui.ui.compare.view import ComparePlot, CompareView

__all__ = ["ComparePlot", "CompareView"]
