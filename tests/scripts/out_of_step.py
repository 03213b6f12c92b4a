"""Hosts issue broadcast and all_reduce in different orders (tests/jobs/test_collectives_jobs.py)."""
import argparse
import socket

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--backend", default="nccl")
args = parser.parse_args()
if args.backend == "smddp":
    import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401  registers "smddp", as on SageMaker

dist.init_process_group(args.backend)
tensor = torch.ones(4)
dist.all_reduce(tensor)
print(f"WARM rank {dist.get_rank()} on {socket.gethostname()}", flush=True)
if socket.gethostname() == "algo-1":
    dist.all_reduce(tensor)  # ALGO-1 FIRST
    dist.broadcast(tensor, src=0)
else:
    dist.broadcast(tensor, src=0)  # ALGO-2 FIRST
    dist.all_reduce(tensor)
