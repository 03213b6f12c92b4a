"""A tiny model trained as GPU code writes it, with each of three strategies in turn (``--modes``):

- ``ddp``: ``DistributedDataParallel(model.cuda(), device_ids=[local_rank])``;
- ``fsdp1``: ``FullyShardedDataParallel(model.cuda(), device_id=torch.cuda.current_device(),
  sync_module_states=True)`` (full shard);
- ``fsdp1-orig``: the same with ``use_orig_params=True`` (what accelerate, so HF ``Trainer``, builds);
- ``fsdp2``: ``fully_shard`` of each Linear and of the model over ``init_device_mesh("cuda", (world,))``.

After training, each mode saves its model as users save it at the end of a job, into
``$SM_MODEL_DIR/saved-<mode>.pt`` on rank 0 (``torch.save``, then a barrier): DDP its module's
``state_dict()``; FSDP v1 a ``FULL_STATE_DICT`` gathered with ``rank0_only`` and ``offload_to_cpu``
and its ``optim_state_dict`` (the path that freed the parameters' memory on the CPU: a SIGSEGV with
``use_orig_params``); FSDP2 ``get_model_state_dict``/``get_optimizer_state_dict`` with
``full_state_dict`` and ``cpu_offload``. The test loads them in its own process.

Every rank trains on its slice of the same global batches (one generator, seeded the same on every
rank) and all-reduces its loss, so each step's reported loss is the global batch's mean loss. Each
rank writes ``$SM_MODEL_DIR/fsdp-rank-<rank>.json`` (per mode: its losses and what the strategy
showed); the test compares them with a one-process reference.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist

STEPS, PER_RANK, LR = 4, 4, 0.1
MOMENTUM = 0.9  # SGD with a state to save (its momentum buffers)

parser = argparse.ArgumentParser()
parser.add_argument("--modes", default="ddp,fsdp1,fsdp1-orig,fsdp2")
args = parser.parse_args()

dist.init_process_group("nccl")
rank, world, local_rank = dist.get_rank(), dist.get_world_size(), int(os.environ["LOCAL_RANK"])
torch.accelerator.set_device_index(local_rank)
report = {
    "rank": rank,
    "accelerator": str(torch.accelerator.current_accelerator()),
    "accelerator_available": torch.accelerator.is_available(),
    "accelerator_count": torch.accelerator.device_count(),
    "device_index": torch.accelerator.current_device_index(),
    "cuda_current": torch.cuda.current_device(),
    "device_module_is_cuda": torch.get_device_module("cuda") is torch.cuda,
}


def train(mode: str) -> dict:
    """Train a fresh model with ``mode``; what the rank saw, and its losses."""
    seen: dict = {}
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).cuda()
    if mode == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    elif mode.startswith("fsdp1"):
        from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy

        model = FullyShardedDataParallel(model, device_id=torch.cuda.current_device(), sync_module_states=True,
                                         sharding_strategy=ShardingStrategy.FULL_SHARD,
                                         use_orig_params=mode == "fsdp1-orig")
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cuda", (world,))
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        weight = next(model.parameters())
        seen["mesh_device_type"] = mesh.device_type
        seen["mesh_backend"] = dist.get_backend(mesh.get_group())
        seen["param_type"] = type(weight).__name__
        seen["param_mesh_device_type"] = weight.device_mesh.device_type
        seen["param_placements"] = [repr(p) for p in weight.placements]
        seen["local_shard_rows"] = weight.to_local().shape[0]

    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    generator = torch.Generator().manual_seed(1234)
    losses = []
    for _step in range(STEPS):
        x = torch.randn(world * PER_RANK, 8, generator=generator)
        y = torch.randn(world * PER_RANK, 4, generator=generator)
        mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
        loss = torch.nn.functional.mse_loss(model(x[mine].cuda()), y[mine].cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    seen["losses"] = losses
    save(mode, model, optimizer)
    return seen


def save(mode: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Rank 0 writes the full model (and optimizer) state as users save it (see the module docstring)."""
    if mode == "ddp":
        states = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}
    elif mode.startswith("fsdp1"):
        from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig, StateDictType
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT,
                                  FullStateDictConfig(offload_to_cpu=True, rank0_only=True),
                                  FullOptimStateDictConfig(offload_to_cpu=True, rank0_only=True)):
            states = {"model": model.state_dict(), "optimizer": FSDP.optim_state_dict(model, optimizer)}
    else:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        states = {"model": get_model_state_dict(model, options=options),
                  "optimizer": get_optimizer_state_dict(model, optimizer, options=options)}
    if rank == 0:
        torch.save(states, os.path.join(os.environ["SM_MODEL_DIR"], f"saved-{mode}.pt"))
    dist.barrier()


report["modes"] = {mode: train(mode) for mode in args.modes.split(",")}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"fsdp-rank-{rank}.json"), "w") as f:
    json.dump(report, f)
dist.destroy_process_group()
