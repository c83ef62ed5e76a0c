"""A sweep's trials, K at a time, and the sweep's process."""
