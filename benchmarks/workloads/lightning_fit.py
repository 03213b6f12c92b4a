"""A tiny Lightning DDP fit (few steps); records when its first statement ran and when it finished."""
import time

STARTED = time.time()

import os  # noqa: E402

from marks import mark  # noqa: E402

mark("first", STARTED)

import torch  # noqa: E402

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


data = torch.utils.data.TensorDataset(torch.randn(256, 32), torch.randint(0, 2, (256,)))
# torchrun's variables, or Open MPI's under mpirun (pytorchddp): Lightning then detects MPI itself
local = int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or "1")
nodes = int(os.environ.get("WORLD_SIZE") or os.environ.get("OMPI_COMM_WORLD_SIZE") or "1") // local
trainer = pl.Trainer(accelerator="cpu", devices=local, num_nodes=nodes, strategy="ddp",
                     max_steps=int(os.environ.get("BENCH_STEPS", "10")), logger=False,
                     enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False)
trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=16))
mark("done")
