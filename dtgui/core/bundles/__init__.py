"""Run bundles: rendering one, what it held, its README, its checkpoints, which project files go in."""
