"""A torch.distributed script with the rendezvous mistakes users make, chosen by ``--mode``.

- ``correct``: ``init_process_group`` from the launcher's environment (``env://``);
- ``local-rank``: passes ``LOCAL_RANK`` as the global rank;
- ``gpu-world``: passes one host's GPU count (``LOCAL_WORLD_SIZE``/``SM_NUM_GPUS``) as the world size;
- ``master``: the ranks of hosts other than algo-1 meet at their own host;
- ``big-world``: asks for one rank more than the launcher started;
- ``skip-last``: the last rank ends without joining (the others wait for it);
- ``slow-last``: the last rank joins ``--delay`` seconds late (correct, only slow).

Every rank that gets through writes ``/opt/ml/model/rank-<rank>.json``.
"""

import argparse
import json
import os
import socket
import time

import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--mode", default="correct")
parser.add_argument("--delay", type=float, default=0.0)
args = parser.parse_args()

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
kwargs = {}
if args.mode == "local-rank":
    kwargs = {"rank": int(os.environ["LOCAL_RANK"]), "world_size": world}
elif args.mode == "gpu-world":
    kwargs = {"rank": rank, "world_size": int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ["SM_NUM_GPUS"])}
elif args.mode == "master":
    kwargs = {"rank": rank, "world_size": world,
              "init_method": f"tcp://{socket.gethostname()}:{os.environ['MASTER_PORT']}"}
elif args.mode == "big-world":
    kwargs = {"rank": rank, "world_size": world + 1}
elif args.mode == "skip-last" and rank == world - 1:
    raise SystemExit(0)
elif args.mode == "slow-last" and rank == world - 1:
    time.sleep(args.delay)
dist.init_process_group("nccl", **kwargs)
with open(f"/opt/ml/model/rank-{dist.get_rank()}.json", "w") as f:
    json.dump({"rank": dist.get_rank(), "world": dist.get_world_size(), "host": socket.gethostname()}, f)
dist.barrier()
dist.destroy_process_group()
