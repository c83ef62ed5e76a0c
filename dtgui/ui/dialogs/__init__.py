"""Dialogs: setting up a sweep, the preferences."""
