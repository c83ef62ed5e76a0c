"""Run records and states, the list of past runs, comparing runs, the run queue's file."""
