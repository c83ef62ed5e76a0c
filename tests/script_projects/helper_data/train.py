"""Reads data/values.csv by a relative path and uses a helper module from the project."""

import os

import helper

values = helper.read_values(os.path.join("data", "values.csv"))
print(f"read {len(values)} values, total {sum(values):g}", flush=True)
with open(os.path.join(os.environ.get("DTGUI_OUTPUT_DIR", "."), "result.txt"), "w") as f:
    f.write(f"{sum(values):g}\n")
