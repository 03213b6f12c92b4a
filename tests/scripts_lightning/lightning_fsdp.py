"""Lightning's ``FSDPStrategy`` as GPU code writes it: ``accelerator="gpu"``, ``devices=SM_NUM_GPUS``,
``num_nodes`` = the hosts, nccl. The script brings its own ``DistributedSampler(shuffle=False)``
(``use_distributed_sampler=False``; Lightning's own would shuffle), which gives rank r the samples
r, r + world, r + 2*world ...: each step's samples over all ranks are one contiguous block of the
dataset. Each step's loss is gathered
from every rank and averaged; each rank writes ``$SM_MODEL_DIR/lightning-fsdp-rank-<rank>.json``.

After ``fit``, ``trainer.save_checkpoint`` writes ``$SM_MODEL_DIR/lightning-fsdp.ckpt`` as users save
at the end of a job: the strategy's default full state dict (FSDP's ``FULL_STATE_DICT`` with
``offload_to_cpu`` and ``rank0_only``, over ``use_orig_params=True``), written by global rank 0.
"""

import json
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.strategies import FSDPStrategy
from tiny_model import TinyModel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

SAMPLES, PER_RANK, LR = 64, 4, 0.1


generator = torch.Generator().manual_seed(1234)
dataset = TensorDataset(torch.randn(SAMPLES, 8, generator=generator), torch.randn(SAMPLES, 4, generator=generator))
trainer = pl.Trainer(accelerator="gpu", devices=int(os.environ["SM_NUM_GPUS"]),
                     num_nodes=len(os.environ["SM_HOSTS"].split(",")), strategy=FSDPStrategy(),
                     max_epochs=1, enable_progress_bar=False, enable_checkpointing=False, logger=False,
                     enable_model_summary=False, use_distributed_sampler=False)
model = TinyModel(LR)
sampler = DistributedSampler(dataset, num_replicas=int(os.environ["WORLD_SIZE"]), rank=int(os.environ["RANK"]),
                             shuffle=False)
trainer.fit(model, DataLoader(dataset, batch_size=PER_RANK, sampler=sampler))
trainer.save_checkpoint(os.path.join(os.environ["SM_MODEL_DIR"], "lightning-fsdp.ckpt"))
report = {"rank": trainer.global_rank, "world_size": trainer.world_size,
          "strategy": type(trainer.strategy).__name__, "root_device": str(trainer.strategy.root_device),
          "losses": model.losses}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"lightning-fsdp-rank-{trainer.global_rank}.json"), "w") as f:
    json.dump(report, f)
