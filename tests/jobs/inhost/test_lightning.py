"""Lightning 2.x on emulated GPUs: one CPU process per GPU, gloo for nccl, smddp stand-in."""

from __future__ import annotations

from typing import Any

import pytest

from ...conftest import import_or_skip

import_or_skip("pytorch_lightning")

LIGHTNING_SCRIPT = """
import os
import torch
import pytorch_lightning as pl
from pytorch_lightning.strategies import DDPStrategy
from torch.utils.data import DataLoader, TensorDataset

SMDDP = os.environ.get("USE_SMDDP") == "1"
if SMDDP:
    import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("loss", loss, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


strategy = DDPStrategy(process_group_backend="smddp") if SMDDP else "ddp"
trainer = pl.Trainer(
    accelerator="gpu", devices=2, strategy=strategy, max_epochs=1, logger=False,
    enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False,
)
data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
trainer.fit(Tiny(), DataLoader(data, batch_size=4))
say("fit-done", trainer.global_rank, trainer.world_size, torch.distributed.get_backend())
"""


@pytest.mark.slow
def test_lightning_gpu_ddp_under_torchrun(run_script: Any) -> None:
    result = run_script(LIGHTNING_SCRIPT, nproc=2)
    out = result.ok()
    assert "fit-done 0 2 gloo" in out and "fit-done 1 2 gloo" in out
    assert "GPU available: True (cuda), used: True" in result.stdout + result.stderr


@pytest.mark.slow
def test_lightning_smddp_sync_dist_fails_like_sagemaker(run_script: Any) -> None:
    result = run_script(LIGHTNING_SCRIPT, nproc=2, USE_SMDDP="1")
    # Lightning maps sync_dist's "mean" to ReduceOp.AVG for every backend but gloo (lightning/fabric/
    # utilities/distributed.py, _sync_ddp); on SageMaker: Lightning-AI/pytorch-lightning#20409.
    assert result.returncode != 0
    assert "SMDDP does not support: ReduceOp" in result.stderr
