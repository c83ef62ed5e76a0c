"""A script that fails: the run must fail with this script's own error line."""

import sys

print("loading the data", flush=True)
print("warning: something on stderr first", file=sys.stderr, flush=True)


def load(path):
    raise FileNotFoundError(f"the labels file {path} is missing (dtgui test)")


load("labels.csv")
