"""dtgui: point-and-click distributed TensorFlow training."""

__version__ = "0.1.0"
