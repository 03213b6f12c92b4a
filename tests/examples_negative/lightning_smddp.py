"""Lightning 2.x under SMDDP with the AWS-documented environment, plus one mistake chosen by
hyperparameter: ``--num-nodes N`` (wrong node count), ``--sync-dist 1`` (``self.log(...,
sync_dist=True)``), ``--run-test 1`` (``trainer.test`` after ``fit``)."""

import argparse
import os

import pytorch_lightning as pl
import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401
import torch
from pytorch_lightning.plugins.environments import LightningEnvironment
from pytorch_lightning.strategies import DDPStrategy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--num-nodes", type=int, default=0)
parser.add_argument("--sync-dist", type=int, default=0)
parser.add_argument("--run-test", type=int, default=0)
args = parser.parse_args()


class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(8, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, sync_dist=bool(args.sync_dist))
        return loss

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


env = LightningEnvironment()
env.world_size = lambda: int(os.environ["WORLD_SIZE"])
env.global_rank = lambda: int(os.environ["RANK"])
num_nodes = args.num_nodes or int(os.environ["WORLD_SIZE"]) // int(os.environ["SM_NUM_GPUS"])
strategy = DDPStrategy(cluster_environment=env, process_group_backend="smddp", accelerator="gpu")
trainer = pl.Trainer(devices=int(os.environ["SM_NUM_GPUS"]), num_nodes=num_nodes,
                     strategy=strategy, max_epochs=1, enable_progress_bar=False, logger=False,
                     enable_checkpointing=False, enable_model_summary=False)
data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
trainer.fit(Model(), DataLoader(data, batch_size=8))
if args.run_test:
    trainer.test(trainer.lightning_module, DataLoader(data, batch_size=8))
