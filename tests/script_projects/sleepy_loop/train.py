"""A training script without TensorFlow, for the run policy of script runs (stop, reattach):
each "epoch" sleeps, then writes its loss to TensorBoard as Keras does (``train/epoch_loss``
in DTGUI_TENSORBOARD_DIR). Arguments: epochs, seconds an epoch."""

import os
import socket
import sys
import time

from dtgui_worker.summaries import scalar_event, version_event
from dtgui_worker.tfrecord import frame

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 0.2
log_dir = os.path.join(os.environ.get("DTGUI_TENSORBOARD_DIR", "logs"), "train")
os.makedirs(log_dir, exist_ok=True)
name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.0.v2"
with open(os.path.join(log_dir, name), "ab") as events:
    events.write(frame(version_event(time.time())))
    for epoch in range(epochs):
        time.sleep(seconds)
        events.write(frame(scalar_event("epoch_loss", epoch, 1.0 / (epoch + 1), time.time())))
        events.flush()
        print(f"Epoch {epoch + 1}/{epochs} - loss: {1.0 / (epoch + 1):.4f}", flush=True)
print("trained", epochs, "epochs")
