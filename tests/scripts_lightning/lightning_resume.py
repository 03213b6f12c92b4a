"""Lightning's ``DDPStrategy`` checkpoints and ``ckpt_path=`` resume across a restart, as GPU code
writes them: ``accelerator="gpu"``, ``devices=SM_NUM_GPUS``, ``num_nodes`` = the hosts, nccl, a
``ModelCheckpoint`` into ``/opt/ml/checkpoints`` (the folder SageMaker uploads to the job's
``checkpoint_s3_uri`` and restores on every host of the next run: a spot restart, or the next job).

First run (no ``last.ckpt``): ``fit`` for ``EPOCHS`` epochs. Restarted run: ``fit(ckpt_path=last.ckpt)``
for ``EPOCHS`` more; Lightning restores the weights, the optimizer's momentum and the loop's epoch.
The sampler is the script's own unshuffled ``DistributedSampler`` (see ``lightning_fsdp.py``): each
step's samples over all ranks are one contiguous block of the dataset. Each rank writes
``$SM_MODEL_DIR/lightning-resume-rank-<rank>.json``: the losses it saw (averaged over ranks) and the
epoch it started from.
"""

import json
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.strategies import DDPStrategy
from tiny_model import TinyModel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

SAMPLES, PER_RANK, LR = 32, 4, 0.1
EPOCHS, MOMENTUM = 2, 0.9
CHECKPOINTS = "/opt/ml/checkpoints/lightning-ddp"

last = os.path.join(CHECKPOINTS, "last.ckpt")
resuming = os.path.exists(last)
generator = torch.Generator().manual_seed(1234)
dataset = TensorDataset(torch.randn(SAMPLES, 8, generator=generator), torch.randn(SAMPLES, 4, generator=generator))
trainer = pl.Trainer(accelerator="gpu", devices=int(os.environ["SM_NUM_GPUS"]),
                     num_nodes=len(os.environ["SM_HOSTS"].split(",")), strategy=DDPStrategy(),
                     max_epochs=2 * EPOCHS if resuming else EPOCHS, enable_progress_bar=False, logger=False,
                     enable_model_summary=False, use_distributed_sampler=False,
                     callbacks=[ModelCheckpoint(dirpath=CHECKPOINTS, save_last=True, save_top_k=0)])
model = TinyModel(LR, MOMENTUM, seed=7 if resuming else 0)  # the load must replace seed 7's
sampler = DistributedSampler(dataset, num_replicas=int(os.environ["WORLD_SIZE"]), rank=int(os.environ["RANK"]),
                             shuffle=False)
trainer.fit(model, DataLoader(dataset, batch_size=PER_RANK, sampler=sampler), ckpt_path=last if resuming else None)
report = {"rank": trainer.global_rank, "world_size": trainer.world_size, "resumed": resuming,
          "strategy": type(trainer.strategy).__name__, "root_device": str(trainer.strategy.root_device),
          "started_at_epoch": model.started_at, "losses": model.losses}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"lightning-resume-rank-{trainer.global_rank}.json"), "w") as f:
    json.dump(report, f)
