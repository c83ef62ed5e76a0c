"""The plots: their building blocks, fast curves, and the dashboard's plot panels and cards."""
