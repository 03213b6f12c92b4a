"""A Lightning DDP fit that ends with Lightning's own teardown (the endings corpus).

Lightning registers ``atexit`` ``_destroy_dist_connection`` for an nccl group (its comment: "PyTorch
>= 2.4 warns about undestroyed NCCL process group, so we need to do it at program exit"); the
script itself never calls ``destroy_process_group()``. Each rank writes ``fit-<rank>.json``.
"""

import json
import os

import pytorch_lightning as pl
import torch
from pytorch_lightning.strategies import DDPStrategy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(8, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    trainer = pl.Trainer(accelerator="gpu", devices=int(os.environ["SM_NUM_GPUS"]),
                         num_nodes=len(json.loads(os.environ["SM_HOSTS"])),
                         strategy=DDPStrategy(process_group_backend="nccl"), max_epochs=1,
                         enable_progress_bar=False, enable_checkpointing=False, logger=False,
                         enable_model_summary=False)
    trainer.fit(Tiny(), DataLoader(data, batch_size=16))
    with open(os.path.join(os.environ["SM_MODEL_DIR"], f"fit-{trainer.global_rank}.json"), "w") as f:
        json.dump({"rank": trainer.global_rank, "world": trainer.world_size, "steps": trainer.global_step}, f)
