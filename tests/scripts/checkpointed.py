"""Trains STEPS steps, checkpointing every step to /opt/ml/checkpoints; resumes from it."""

import json
import os
import socket
import time

STEPS = 12
ckpt = "/opt/ml/checkpoints/state.json"
step = 0
if os.path.exists(ckpt):
    with open(ckpt) as f:
        step = json.load(f)["step"]
    print(f"resumed from step {step}", flush=True)
while step < STEPS:
    time.sleep(0.4)
    step += 1
    with open(ckpt + ".tmp", "w") as f:
        json.dump({"step": step}, f)
    os.replace(ckpt + ".tmp", ckpt)
    print(f"step {step}", flush=True)
if socket.gethostname() == "algo-1":
    with open("/opt/ml/model/final.json", "w") as f:
        json.dump({"steps": step}, f)
