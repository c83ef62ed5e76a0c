"""The run wizard: pick a strategy and options, check the model, review, launch or export."""

from .wizard import RunWizard

__all__ = ["RunWizard"]
