"""Starting runs: the launch pipeline, the reattach, resume, and the headless watcher."""
