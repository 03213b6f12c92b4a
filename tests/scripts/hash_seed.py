"""What a rank's str hash seed makes of it, and how it was started (tests/jobs/test_fast_start.py).

Writes ``hash-<RANK>.json`` into the model dir: ``hash("layer.weight")`` and a set's iteration order in
this process; the same hash from a fresh interpreter of this host started with this process's
``PYTHONHASHSEED`` (the oracle for a fixed seed: what a normal start would print); and whether the
parent process is the emulator's fast-start zygote (a forked rank) or torchrun (a normal start)."""

import json
import os
import subprocess
import sys

NAME = "layer.weight"
with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
    parent = f.read().replace(b"\0", b" ").decode()
fresh = None
if os.environ.get("PYTHONHASHSEED"):
    fresh = int(subprocess.run([sys.executable, "-c", f"print(hash({NAME!r}))"], capture_output=True, text=True,
                               check=True, env={"PYTHONHASHSEED": os.environ["PYTHONHASHSEED"]}).stdout)
record = {"rank": int(os.environ["RANK"]), "hash": hash(NAME), "order": list({"a.w", "b.w", "c.w", "d.b", "e.b"}),
          "fresh_hash": fresh, "forked": "_sm_emulator_faststart" in parent, "torchrun_parent": "torchrun" in parent}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"hash-{record['rank']}.json"), "w") as f:
    json.dump(record, f)
