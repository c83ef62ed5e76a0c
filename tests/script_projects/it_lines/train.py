"""A training script's own log format: `[it 120] loss=0.53 lr=1e-3`, one line every 10
iterations, counting to DTGUI_STEPS (no TensorFlow: the lines are what matters here)."""

import os
import sys
import time

steps = int(os.environ.get("DTGUI_STEPS", "100"))
loss = 2.0
for it in range(10, steps + 1, 10):
    loss *= 0.8
    print(f"[it {it}] loss={loss:.4f} lr=1e-3")
    sys.stdout.flush()
    time.sleep(float(os.environ.get("IT_SLEEP", "0.05")))
print("done: 0 errors")
