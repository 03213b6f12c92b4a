"""FSDP checkpoints through ``torch.distributed.checkpoint`` (DCP), as GPU code writes them, across
two runs of a job that share a ``checkpoint_dir`` (SageMaker syncs every host's
``/opt/ml/checkpoints`` to it and restores it to every host on the next run).

Per strategy (FSDP v1 with ``ShardedStateDictConfig``; FSDP2 ``fully_shard`` over a cuda mesh):
the first run trains two steps and saves the sharded state dict to
``/opt/ml/checkpoints/<mode>``; the next run finds it, builds the model from another seed, loads
the checkpoint, and reports the full parameters' sum (gathered from the shards), which must be the
first run's. Each rank writes ``$SM_MODEL_DIR/checkpoint-rank-<rank>.json``.
"""

import json
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

ROOT = "/opt/ml/checkpoints"

dist.init_process_group("nccl")
rank, world, local_rank = dist.get_rank(), dist.get_world_size(), int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)


def build(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).cuda()


def train(model: torch.nn.Module, steps: int) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(rank)
    for _ in range(steps):
        x = torch.randn(4, 8, generator=generator).cuda()
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def fsdp1() -> dict:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardedStateDictConfig, StateDictType

    path = os.path.join(ROOT, "fsdp1")
    resumed = os.path.exists(os.path.join(path, ".metadata"))
    model = FSDP(build(1 if resumed else 0), device_id=torch.cuda.current_device(), sync_module_states=True)
    if resumed:
        with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT, ShardedStateDictConfig()):
            state = {"model": model.state_dict()}
            dcp.load(state, checkpoint_id=path)
            model.load_state_dict(state["model"])
    else:
        train(model, 2)
        with FSDP.state_dict_type(model, StateDictType.SHARDED_STATE_DICT, ShardedStateDictConfig()):
            dcp.save({"model": model.state_dict()}, checkpoint_id=path)
    with FSDP.summon_full_params(model):
        total = sum(p.detach().sum().item() for p in model.parameters())
    train(model, 1)  # and it still trains
    return {"resumed": resumed, "sum": total}


def fsdp2() -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    path = os.path.join(ROOT, "fsdp2")
    resumed = os.path.exists(os.path.join(path, ".metadata"))
    model = build(1 if resumed else 0)
    mesh = init_device_mesh("cuda", (world,))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if resumed:
        state = {"model": model.state_dict()}
        dcp.load(state, checkpoint_id=path)
        model.load_state_dict(state["model"])
    else:
        train(model, 2)
        dcp.save({"model": model.state_dict()}, checkpoint_id=path)
    total = sum(p.full_tensor().detach().sum().item() for p in model.parameters())
    train(model, 1)
    return {"resumed": resumed, "sum": total}


report = {"rank": rank, "fsdp1": fsdp1(), "fsdp2": fsdp2()}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"checkpoint-rank-{rank}.json"), "w") as f:
    json.dump(report, f)
dist.destroy_process_group()
