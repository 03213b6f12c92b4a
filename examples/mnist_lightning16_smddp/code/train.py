"""MNIST with PyTorch Lightning 1.6 on SMDDP, written as 2022's SageMaker examples wrote it.

The pattern AWS documented for Lightning 1.6+ ("Use the SMDDP library with PyTorch Lightning"):
import ``smdistributed.dataparallel.torch.torch_smddp`` (registers the ``smddp`` backend), a
``LightningEnvironment`` whose world size and rank come from the launcher's ``WORLD_SIZE``/``RANK``
(``smddprun`` sets them), ``DDPStrategy(cluster_environment=env, process_group_backend="smddp",
accelerator="gpu")`` and ``Trainer(devices=<GPUs per host>, num_nodes=<hosts>)``; validation
metrics through ``validation_epoch_end`` (removed in Lightning 2.0). The data are read from the
training channel: the example ships ``mnist.npz`` so nothing downloads.
"""

import argparse
import json
import os

import numpy as np
import pytorch_lightning as pl
import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401  (registers "smddp")
import torch
from pytorch_lightning.plugins.environments.lightning_environment import LightningEnvironment
from pytorch_lightning.strategies import DDPStrategy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split


class Classifier(pl.LightningModule):
    def __init__(self, lr):
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
        self.losses = []
        self.val_accuracy = None

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.losses.append(loss.item())
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        return (self.net(x).argmax(dim=1) == y).float().mean()

    def validation_epoch_end(self, outputs):
        accuracy = torch.stack(outputs).mean()
        self.log("val_acc", accuracy, sync_dist=True)
        self.val_accuracy = accuracy.item()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def load(channel):
    data = np.load(os.path.join(channel, "mnist.npz"))
    images = torch.from_numpy(data["images"]).float().div(255.0).view(-1, 784)
    return TensorDataset(images, torch.from_numpy(data["labels"]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    parser.add_argument("--data-dir", default=os.environ.get("SM_CHANNEL_TRAINING", "data"))
    parser.add_argument("--output-data-dir", default=os.environ.get("SM_OUTPUT_DATA_DIR", "/opt/ml/output/data"))
    args = parser.parse_args()

    env = LightningEnvironment()
    env.world_size = lambda: int(os.environ["WORLD_SIZE"])
    env.global_rank = lambda: int(os.environ["RANK"])
    num_gpus = int(os.environ["SM_NUM_GPUS"])
    world_size = int(os.environ["WORLD_SIZE"])
    num_nodes = world_size // num_gpus
    ddp = DDPStrategy(cluster_environment=env, process_group_backend="smddp", accelerator="gpu")

    pl.seed_everything(0)
    train, val = random_split(load(args.data_dir), [896, 128],
                              generator=torch.Generator().manual_seed(0))
    # The accelerator comes from the strategy: Lightning 1.6 refuses it in both places.
    trainer = pl.Trainer(max_epochs=args.epochs, strategy=ddp, devices=num_gpus,
                         num_nodes=num_nodes, enable_progress_bar=False,
                         enable_checkpointing=False, logger=False, enable_model_summary=False)
    model = Classifier(args.lr)
    trainer.fit(model, DataLoader(train, batch_size=args.batch_size, shuffle=True),
                DataLoader(val, batch_size=args.batch_size))
    if trainer.global_rank == 0:
        print(f"lightning={pl.__version__} torch={torch.__version__} "
              f"backend={torch.distributed.get_backend()} world_size={world_size} "
              f"num_nodes={num_nodes}")
        print(f"first_loss={model.losses[0]:.4f}")
        print(f"last_loss={np.mean(model.losses[-5:]):.4f}")
        print(f"val_acc={model.val_accuracy:.4f}")
        os.makedirs(args.output_data_dir, exist_ok=True)  # what the example matrix judges (output.tar.gz)
        with open(os.path.join(args.output_data_dir, "metrics.json"), "w") as f:
            json.dump({"first_loss": model.losses[0], "last_loss": float(np.mean(model.losses[-5:])),
                       "world_size": world_size, "gpus_per_host": num_gpus, "torch": torch.__version__,
                       "lightning": pl.__version__}, f)
        torch.save(model.net.state_dict(), os.path.join(args.model_dir, "model.pt"))


if __name__ == "__main__":
    main()
