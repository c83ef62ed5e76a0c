"""The window's pages and panels: the dashboard, the Runs page, the sweep view, this machine."""
