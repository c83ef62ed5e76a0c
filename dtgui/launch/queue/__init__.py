"""Single runs that wait for free GPUs or machines, and the queue's process."""
