"""A training script without TensorFlow, for the run policy of script runs (stop, reattach):
each "epoch" sleeps, then writes its loss to TensorBoard as Keras does (``train/epoch_loss``
in DTGUI_TENSORBOARD_DIR). Arguments: epochs, seconds an epoch, and what it does on SIGTERM:
``die`` (Python's default), ``ignore`` (as a script under MultiWorkerMirrored, whose SIGTERM
TensorFlow's preemption notifier takes) or ``save`` (the handler of docs/own-scripts.md: the
epoch in flight ends, a second of saving writes the epoch to ``saved-PID`` in DTGUI_CHECKPOINT_DIR)."""

import os
import signal
import socket
import sys
import time

from dtgui_worker.summaries import scalar_event, version_event
from dtgui_worker.tfrecord import frame

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 0.2
on_sigterm = sys.argv[3] if len(sys.argv) > 3 else "die"
stop = False
if on_sigterm == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif on_sigterm == "save":
    signal.signal(signal.SIGTERM, lambda *_: globals().update(stop=True))
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
        if stop:
            time.sleep(1.0)
            saved = os.path.join(os.environ["DTGUI_CHECKPOINT_DIR"], f"saved-{os.getpid()}")
            with open(saved, "w") as f:
                f.write(str(epoch))
            print("saved at epoch", epoch, flush=True)
            sys.exit(0)
print("trained", epochs, "epochs")
