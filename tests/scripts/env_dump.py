"""Every rank (or the single process of a plain job) dumps what it sees to /opt/ml/model.

Used by the cross-backend comparison: the same dump on the process and docker backends.
"""

import json
import os
import socket

rank = os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0"
report = {
    "env": dict(os.environ),
    "hostname": socket.gethostname(),
    "resolves": {h: socket.gethostbyname(h) for h in json.loads(os.environ["SM_HOSTS"])},
    "cwd": os.getcwd(),
    "opt_ml": sorted(os.listdir("/opt/ml")),
    "config": sorted(os.listdir("/opt/ml/input/config")),
}
with open(f"/opt/ml/model/env-{socket.gethostname()}-{rank}.json", "w") as f:
    json.dump(report, f, sort_keys=True)
