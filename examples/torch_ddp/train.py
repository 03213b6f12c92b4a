"""Plain-torch DDP written for GPU hosts: ``init_process_group("nccl")``, ``.cuda()``,
``DistributedDataParallel(model, device_ids=[local_rank])``.

Works under ``torch_distributed`` (torchrun sets RANK/WORLD_SIZE/LOCAL_RANK) and under
``pytorchddp``/``smdistributed`` (mpirun + smddprun; falls back to OMPI_COMM_WORLD_* when only MPI's
variables are there), as users' scripts do.
"""

import argparse
import json
import os

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def env_int(*names, default=None):
    for name in names:
        if name in os.environ:
            return int(os.environ[name])
    if default is None:
        raise KeyError(f"none of {names} is set")
    return default


def load(channel):
    data = np.load(os.path.join(channel, "mnist.npz"))
    images = torch.from_numpy(data["images"]).float().div(255.0).view(-1, 784)
    return TensorDataset(images, torch.from_numpy(data["labels"]))


def save_metrics(folder, **values):
    """What the example matrix judges, as a file in output.tar.gz: read from a file, it cannot be
    split the way mpirun's --tag-output may split a printed line."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "metrics.json"), "w") as f:
        json.dump(values, f)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    parser.add_argument("--output-data-dir", default=os.environ.get("SM_OUTPUT_DATA_DIR", "/opt/ml/output/data"))
    parser.add_argument("--data-dir", default=os.environ.get("SM_CHANNEL_TRAINING", "data"))
    args = parser.parse_args()

    rank = env_int("RANK", "OMPI_COMM_WORLD_RANK")
    world_size = env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE")
    local_rank = env_int("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")
    os.environ.setdefault("MASTER_ADDR", os.environ.get("SM_MASTER_ADDR", "algo-1"))
    os.environ.setdefault("MASTER_PORT", "7777")
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(local_rank)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10)).cuda()
    model = DistributedDataParallel(model, device_ids=[local_rank])
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    dataset = load(args.data_dir)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    losses = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.cuda(), y.cuda()
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    total = torch.tensor([np.mean(losses[-5:])]).cuda()
    dist.all_reduce(total)  # SUM: the one op every backend (smddp included) supports
    if rank == 0:
        print(f"world_size={world_size} host={os.environ.get('SM_CURRENT_HOST')}")
        print(f"first_loss={losses[0]:.4f}")
        print(f"last_loss={total.item() / world_size:.4f}")
        save_metrics(args.output_data_dir, first_loss=losses[0], last_loss=total.item() / world_size,
                     world_size=world_size, gpus_per_host=int(os.environ["SM_NUM_GPUS"]), torch=torch.__version__)
        torch.save(model.module.state_dict(), os.path.join(args.model_dir, "model.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
