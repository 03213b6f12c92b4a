"""Rank 3 loops in a data reader while ranks 0-2 wait in all_reduce (tests/jobs/test_stacks_jobs.py).

Each rank prints ``WARM rank R of W on HOST`` with the text and the newline written apart, a pause
between (as ``print`` under ``PYTHONUNBUFFERED=1`` does, only slower): the two ranks of a host share
its stdout, so their markers interleave (``...on algo-2WARM rank 3...``) and the tests that read
them must not depend on line boundaries (tests/jobs/test_kept.py).
"""
import argparse
import os
import sys
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
sys.stdout.write(f"WARM rank {rank} of {dist.get_world_size()} on {os.uname().nodename}")
sys.stdout.flush()
time.sleep(0.5)  # the other rank of this host writes its marker meanwhile
sys.stdout.write("\n")
sys.stdout.flush()
if rank == 3:
    load_batch()
step(tensor)
