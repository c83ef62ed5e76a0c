"""The host layer and the executors: where a run's tasks run (this machine, over SSH) and how they are started, watched and signalled."""
