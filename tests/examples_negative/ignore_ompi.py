"""Under ``mpi``, a script that ignores OMPI_COMM_WORLD_*: RANK/WORLD_SIZE are not set by mpirun,
so every process falls back to rank 0 of a one-process group and trains alone."""

import os

import torch
import torch.distributed as dist

rank = int(os.environ.get("RANK", 0))
world_size = int(os.environ.get("WORLD_SIZE", 1))
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:0", rank=rank, world_size=world_size)
t = torch.ones(1).cuda()
dist.all_reduce(t)
print(f"rank={dist.get_rank()} world_size={dist.get_world_size()} sum={t.item()}")
dist.destroy_process_group()
