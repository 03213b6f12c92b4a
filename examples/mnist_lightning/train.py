"""MNIST with Lightning 2.x ``DDPStrategy`` on emulated GPUs.

``--backend ddp`` (distribution ``torch_distributed``): Lightning detects torchrun's environment.
``--backend smddp`` (distribution ``smdistributed.dataparallel``): the AWS-documented pattern —
``import smdistributed.dataparallel.torch.torch_smddp``, a ``LightningEnvironment`` whose
world size and global rank read ``WORLD_SIZE``/``RANK``, and ``process_group_backend="smddp"``.
"""

import argparse
import json
import os

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.strategies import DDPStrategy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Classifier(pl.LightningModule):
    def __init__(self, lr):
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
        self.losses = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.losses.append(loss.item())
        self.log("train_loss", loss)  # no sync_dist: SMDDP has no ReduceOp.AVG
        return loss

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def load(channel):
    data = np.load(os.path.join(channel, "mnist.npz"))
    images = torch.from_numpy(data["images"]).float().div(255.0).view(-1, 784)
    return TensorDataset(images, torch.from_numpy(data["labels"]))


def strategy_for(backend):
    if backend == "smddp":
        import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401  registers "smddp"
        from pytorch_lightning.plugins.environments import LightningEnvironment

        env = LightningEnvironment()
        env.world_size = lambda: int(os.environ["WORLD_SIZE"])
        env.global_rank = lambda: int(os.environ["RANK"])
        num_nodes = int(os.environ["WORLD_SIZE"]) // int(os.environ["SM_NUM_GPUS"])
        return DDPStrategy(cluster_environment=env, process_group_backend="smddp",
                           accelerator="gpu"), num_nodes
    return DDPStrategy(process_group_backend="nccl"), len(os.environ["SM_HOSTS"].split(","))


def save_metrics(folder, **values):
    """What the example matrix judges, as a file in output.tar.gz: read from a file, it cannot be
    split the way mpirun's --tag-output may split a printed line."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "metrics.json"), "w") as f:
        json.dump(values, f)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["ddp", "smddp"], default="ddp")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--run-test", type=int, default=0, help="call trainer.test after fit")
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    parser.add_argument("--output-data-dir", default=os.environ.get("SM_OUTPUT_DATA_DIR", "/opt/ml/output/data"))
    parser.add_argument("--data-dir", default=os.environ.get("SM_CHANNEL_TRAINING", "data"))
    args = parser.parse_args()

    pl.seed_everything(0)
    strategy, num_nodes = strategy_for(args.backend)
    # The strategy already names the accelerator under smddp (AWS's pattern); Lightning refuses both.
    accelerator = "auto" if args.backend == "smddp" else "gpu"
    trainer = pl.Trainer(accelerator=accelerator, devices=int(os.environ["SM_NUM_GPUS"]),
                         num_nodes=num_nodes, strategy=strategy, max_epochs=args.epochs,
                         enable_progress_bar=False, enable_checkpointing=False, logger=False,
                         enable_model_summary=False)
    model = Classifier(args.lr)
    dataset = load(args.data_dir)
    world_size = int(os.environ["WORLD_SIZE"])  # read before fit: LightningEnvironment.teardown deletes it
    trainer.fit(model, DataLoader(dataset, batch_size=args.batch_size, shuffle=True))
    if args.run_test:
        trainer.test(model, DataLoader(dataset, batch_size=256))
    if trainer.global_rank == 0:
        print(f"world_size={world_size} num_nodes={num_nodes}")
        print(f"first_loss={model.losses[0]:.4f}")
        print(f"last_loss={np.mean(model.losses[-5:]):.4f}")
        save_metrics(args.output_data_dir, first_loss=model.losses[0], last_loss=float(np.mean(model.losses[-5:])),
                     world_size=world_size, gpus_per_host=int(os.environ["SM_NUM_GPUS"]), torch=torch.__version__,
                     lightning=pl.__version__)
        torch.save(model.net.state_dict(), os.path.join(args.model_dir, "model.pt"))


if __name__ == "__main__":
    main()
