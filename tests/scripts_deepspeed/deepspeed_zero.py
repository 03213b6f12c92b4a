"""DeepSpeed ZeRO as GPU code writes it: ``deepspeed.init_distributed("nccl")``,
``deepspeed.initialize`` with a ZeRO config, ``engine.backward``/``engine.step``, for ZeRO stages 2
and 3 in turn, with torch's AdamW (``"torch_adam": true``: DeepSpeed's default FusedAdam is a CUDA
kernel compiled on first use, not emulated).

Every rank trains on its slice of the same global batches and all-reduces its loss; each rank
writes ``$SM_MODEL_DIR/deepspeed-rank-<rank>.json``; the test compares with a one-process reference.
"""

import json
import os

import deepspeed
import torch
import torch.distributed as dist

STEPS, PER_RANK, LR = 4, 4, 0.01

deepspeed.init_distributed(dist_backend="nccl")
rank, world = dist.get_rank(), dist.get_world_size()


def train(stage: int) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    config = {"train_micro_batch_size_per_gpu": PER_RANK, "steps_per_print": 10_000,
              "zero_optimization": {"stage": stage},
              "optimizer": {"type": "AdamW", "params": {"lr": LR, "weight_decay": 0.0, "torch_adam": True}}}
    engine, _optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    generator = torch.Generator().manual_seed(1234)
    losses = []
    for _ in range(STEPS):
        x = torch.randn(world * PER_RANK, 8, generator=generator)
        y = torch.randn(world * PER_RANK, 4, generator=generator)
        mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
        loss = torch.nn.functional.mse_loss(engine(x[mine].to(engine.device)), y[mine].to(engine.device))
        engine.backward(loss)
        engine.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    return {"device": str(engine.device), "zero_stage": engine.zero_optimization_stage(), "losses": losses}


report = {"rank": rank, "accelerator": deepspeed.get_accelerator().device_name(),
          "stages": {str(stage): train(stage) for stage in (2, 3)}}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"deepspeed-rank-{rank}.json"), "w") as f:
    json.dump(report, f)
