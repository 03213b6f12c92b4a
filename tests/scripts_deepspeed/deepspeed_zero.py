"""DeepSpeed ZeRO as GPU code writes it: ``deepspeed.init_distributed("nccl")``,
``deepspeed.initialize`` with a ZeRO config, ``engine.backward``/``engine.step``, for ZeRO stages 2
and 3 in turn, with torch's AdamW (``"torch_adam": true``: DeepSpeed's default FusedAdam is a CUDA
kernel compiled on first use, not emulated).

First run (``/opt/ml/checkpoints`` empty): every rank trains on its slice of the same global batches
and all-reduces its loss, then ``engine.save_checkpoint("/opt/ml/checkpoints/zero<stage>", tag="final")``
with ``"checkpoint": {"use_node_local_storage": true}`` (each SageMaker instance's checkpoint folder
is its own disk: local rank 0 of every host writes the model states, every rank its optimizer
shard; SageMaker uploads each host's folder to the one checkpoint S3 URI).

Restarted run (the checkpoint folder restored from S3 on every host, as SageMaker does): a fresh
engine ``load_checkpoint``s the tag, trains ``MORE`` steps on the next global batches, and rank 0
runs the ``zero_to_fp32.py`` DeepSpeed copied beside the checkpoint, as its docs say users do
(``python zero_to_fp32.py <checkpoint dir> <output dir>``), into ``$SM_MODEL_DIR/zero<stage>-fp32``.

Each rank writes ``$SM_MODEL_DIR/deepspeed-rank-<rank>.json``; the test compares with a one-process
reference.
"""

import json
import os
import subprocess
import sys

import deepspeed
import torch
import torch.distributed as dist

STEPS, PER_RANK, LR = 4, 4, 0.01
MORE = 2
CHECKPOINTS = "/opt/ml/checkpoints"

deepspeed.init_distributed(dist_backend="nccl")
rank, world = dist.get_rank(), dist.get_world_size()


def engine_for(stage: int, seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    config = {"train_micro_batch_size_per_gpu": PER_RANK, "steps_per_print": 10_000,
              "zero_optimization": {"stage": stage}, "checkpoint": {"use_node_local_storage": True},
              "optimizer": {"type": "AdamW", "params": {"lr": LR, "weight_decay": 0.0, "torch_adam": True}}}
    engine, _optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    return engine


def batches(skip: int, count: int):
    generator = torch.Generator().manual_seed(1234)
    for step in range(skip + count):
        x = torch.randn(world * PER_RANK, 8, generator=generator)
        y = torch.randn(world * PER_RANK, 4, generator=generator)
        if step >= skip:
            yield x, y


def train(engine, skip: int, count: int) -> list[float]:
    losses = []
    for x, y in batches(skip, count):
        mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
        loss = torch.nn.functional.mse_loss(engine(x[mine].to(engine.device)), y[mine].to(engine.device))
        engine.backward(loss)
        engine.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    return losses


def first_run(stage: int) -> dict:
    engine = engine_for(stage, seed=0)
    losses = train(engine, 0, STEPS)
    engine.save_checkpoint(os.path.join(CHECKPOINTS, f"zero{stage}"), tag="final")
    return {"device": str(engine.device), "zero_stage": engine.zero_optimization_stage(), "losses": losses}


def resumed_run(stage: int) -> dict:
    folder = os.path.join(CHECKPOINTS, f"zero{stage}")
    engine = engine_for(stage, seed=99)  # other weights than the first run's: the load must replace them
    path, _client = engine.load_checkpoint(folder, tag="final")
    losses = train(engine, STEPS, MORE)
    if rank == 0:
        out = os.path.join(os.environ["SM_MODEL_DIR"], f"zero{stage}-fp32")
        subprocess.run([sys.executable, os.path.join(folder, "zero_to_fp32.py"), folder, out, "--tag", "final"],
                       check=True)
    dist.barrier()
    return {"loaded": path is not None, "zero_stage": engine.zero_optimization_stage(), "losses": losses}


resuming = os.path.exists(os.path.join(CHECKPOINTS, "zero2", "final"))
run = resumed_run if resuming else first_run
report = {"rank": rank, "accelerator": deepspeed.get_accelerator().device_name(), "resumed": resuming,
          "stages": {str(stage): run(stage) for stage in (2, 3)}}
name = f"deepspeed-{'resumed' if resuming else 'rank'}-{rank}.json"
with open(os.path.join(os.environ["SM_MODEL_DIR"], name), "w") as f:
    json.dump(report, f)
