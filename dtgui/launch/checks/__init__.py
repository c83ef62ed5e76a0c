"""The checks before a launch: can each machine's Python run the bundle, a user's script, a user's model file."""
