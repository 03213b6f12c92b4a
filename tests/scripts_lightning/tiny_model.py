"""The small model the Lightning job scripts train (``lightning_fsdp.py``, ``lightning_resume.py``):
``Linear(8, 16) -> ReLU -> Linear(16, 4)`` seeded with ``seed``, SGD, and every step's loss averaged
over all ranks (``all_gather``) kept in ``losses``, for the tests' one-process reference."""

import pytorch_lightning as pl
import torch


class TinyModel(pl.LightningModule):
    def __init__(self, lr: float, momentum: float = 0.0, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        self.lr, self.momentum = lr, momentum
        self.losses: list = []
        self.started_at = None

    def on_train_start(self) -> None:
        self.started_at = self.current_epoch

    def training_step(self, batch, batch_index):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.losses.append(self.all_gather(loss.detach()).mean().item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=self.momentum)
