"""Runs into MLflow, their HParams summary, TensorBoard."""
