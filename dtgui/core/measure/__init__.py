"""What a run's steps, devices, memory and network did, and the verdicts drawn from it."""
