"""Rank 3 loops in a data reader while ranks 0-2 wait in all_reduce (tests/test_stacks_jobs.py)."""
import argparse
import os
import time

import torch
import torch.distributed as dist


def load_batch():
    while True:  # a data reader that never returns
        time.sleep(0.05)  # READER


def step(tensor):
    dist.all_reduce(tensor)  # STEP


parser = argparse.ArgumentParser()
parser.add_argument("--backend", default="nccl")
args = parser.parse_args()
if args.backend == "smddp":
    import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401  registers "smddp", as on SageMaker

dist.init_process_group(args.backend)
rank = dist.get_rank()
tensor = torch.ones(4)
step(tensor)
print(f"WARM rank {rank} of {dist.get_world_size()} on {os.uname().nodename}", flush=True)
if rank == 3:
    load_batch()
step(tensor)
