"""Sweeps: parameters and trials, the Optuna study, a sweep's life, its export and rerun without dtgui."""
