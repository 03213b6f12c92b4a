"""MNIST with Lightning 1.5: ``DDPPlugin(parallel_devices=[cuda:i ...], cluster_environment=env)``
and ``Trainer(gpus=N)``, the way SageMaker's 2021-2022 examples wrote it.

``--backend smddp`` sets ``PL_TORCH_DISTRIBUTED_BACKEND=smddp`` (Lightning 1.5 reads it in
``init_dist_connection``) after importing ``smdistributed.dataparallel.torch.torch_smddp``.
The environment reads ``WORLD_SIZE``/``RANK``/``LOCAL_RANK``, which both torchrun and smddprun set.
"""

import argparse
import json
import os

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.plugins import DDPPlugin
from pytorch_lightning.plugins.environments import LightningEnvironment
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
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def load(channel):
    data = np.load(os.path.join(channel, "mnist.npz"))
    images = torch.from_numpy(data["images"]).float().div(255.0).view(-1, 784)
    return TensorDataset(images, torch.from_numpy(data["labels"]))


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
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    parser.add_argument("--output-data-dir", default=os.environ.get("SM_OUTPUT_DATA_DIR", "/opt/ml/output/data"))
    parser.add_argument("--data-dir", default=os.environ.get("SM_CHANNEL_TRAINING", "data"))
    args = parser.parse_args()

    if args.backend == "smddp":
        import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401

        os.environ["PL_TORCH_DISTRIBUTED_BACKEND"] = "smddp"
    gpus = int(os.environ["SM_NUM_GPUS"])
    env = LightningEnvironment()
    env.world_size = lambda: int(os.environ["WORLD_SIZE"])
    env.global_rank = lambda: int(os.environ["RANK"])
    num_nodes = int(os.environ["WORLD_SIZE"]) // gpus
    ddp = DDPPlugin(parallel_devices=[torch.device("cuda", i) for i in range(gpus)],
                    cluster_environment=env)

    pl.seed_everything(0)
    trainer = pl.Trainer(gpus=gpus, num_nodes=num_nodes, plugins=[ddp], max_epochs=args.epochs,
                         progress_bar_refresh_rate=0, checkpoint_callback=False, logger=False,
                         weights_summary=None)
    model = Classifier(args.lr)
    world_size = int(os.environ["WORLD_SIZE"])  # read before fit: LightningEnvironment.teardown deletes it
    trainer.fit(model, DataLoader(load(args.data_dir), batch_size=args.batch_size, shuffle=True))
    if trainer.global_rank == 0:
        print(f"lightning={pl.__version__} world_size={world_size} num_nodes={num_nodes}")
        print(f"first_loss={model.losses[0]:.4f}")
        print(f"last_loss={np.mean(model.losses[-5:]):.4f}")
        save_metrics(args.output_data_dir, first_loss=model.losses[0], last_loss=float(np.mean(model.losses[-5:])),
                     world_size=world_size, gpus_per_host=gpus, torch=torch.__version__, lightning=pl.__version__)
        torch.save(model.net.state_dict(), os.path.join(args.model_dir, "model.pt"))


if __name__ == "__main__":
    main()
