"""Which machines and GPUs are free, and which a sweep's trials hold: shared by the run queue and sweeps."""
