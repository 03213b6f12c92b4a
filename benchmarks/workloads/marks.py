"""``mark(kind, when)``: record a moment of this rank in a small JSON file (copied next to each
workload; see :mod:`benchmarks.worker`). Standard library only: it runs before torch is imported."""
import json
import os
import socket
import time


def mark(kind, when=None):
    folder = os.path.join(os.environ.get("SM_OUTPUT_DATA_DIR") or os.environ["BENCH_MARKS_DIR"], "bench-marks")
    os.makedirs(folder, exist_ok=True)
    host = socket.gethostname()
    record = {"mark": kind, "time": time.time() if when is None else when, "host": host,
              "rank": os.environ.get("RANK")}
    with open(os.path.join(folder, f"{host}-{os.getpid()}-{kind}.json"), "w") as f:
        json.dump(record, f)
