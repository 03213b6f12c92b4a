"""A DDP rank that ends in one of the correct ways scripts end (the endings corpus).

Rank r ends with ``ENDINGS[(r + shift) % len(ENDINGS)]`` (hyperparameters ``shift`` and
``backend``), so one 2-host job tries several endings, each as this process's real ending. Before
its ending every rank writes ``ending-<rank>.json`` to ``SM_MODEL_DIR`` (the work is done).

Ranks come from torchrun (``RANK``), Open MPI (``OMPI_COMM_WORLD_RANK``: pytorchddp,
smdistributed, mpi), or, for a plain job, from the host's place in ``SM_HOSTS``.
"""

import argparse
import json
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

ENDINGS = ("no-destroy", "destroy", "sys-exit", "os-exit", "daemon-thread", "dataloader-workers")


def ranks():
    """(rank, world size, local rank) as this launch gives them."""
    for rank, size, local in (("RANK", "WORLD_SIZE", "LOCAL_RANK"),
                              ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK")):
        if rank in os.environ:
            return int(os.environ[rank]), int(os.environ[size]), int(os.environ[local])
    hosts = json.loads(os.environ["SM_HOSTS"])
    return hosts.index(os.environ["SM_CURRENT_HOST"]), len(hosts), 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shift", type=int, default=0)
    parser.add_argument("--backend", default="nccl")
    args = parser.parse_args()
    rank, world, local = ranks()
    ending = ENDINGS[(rank + args.shift) % len(ENDINGS)]
    os.environ.setdefault("MASTER_ADDR", json.loads(os.environ["SM_HOSTS"])[0])
    os.environ.setdefault("MASTER_PORT", "7777")
    if args.backend == "smddp":
        import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401  registers "smddp"
    torch.cuda.set_device(local)
    dist.init_process_group(args.backend, rank=rank, world_size=world)

    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(8, 2).cuda(), device_ids=[local])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    workers = 2 if ending == "dataloader-workers" else 0
    loader = DataLoader(data, batch_size=16, num_workers=workers, persistent_workers=workers > 0)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
        optimizer.step()
    total = torch.ones(1, device="cuda")
    dist.all_reduce(total)
    with open(os.path.join(os.environ["SM_MODEL_DIR"], f"ending-{rank}.json"), "w") as f:
        json.dump({"rank": rank, "ending": ending, "sum": total.item(), "world": world}, f)

    if ending == "destroy":
        dist.destroy_process_group()
    elif ending == "sys-exit":
        sys.exit(0)
    elif ending == "os-exit":
        sys.stdout.flush()
        os._exit(0)
    elif ending == "daemon-thread":
        threading.Thread(target=lambda: time.sleep(3600), daemon=True, name="uploader").start()
    # "dataloader-workers": the loader's persistent workers are still alive when the script ends
    print(f"rank {rank} ends: {ending}")


if __name__ == "__main__":
    main()
