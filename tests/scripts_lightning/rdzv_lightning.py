"""Lightning DDP under SMDDP (mpirun), with or without AWS's ``LightningEnvironment`` fix (``--fix``).

Without the fix, Lightning's ``LightningEnvironment`` computes the global rank as
``NODE_RANK * devices + LOCAL_RANK``; ``NODE_RANK`` is unset under mpirun, so every host claims
ranks 0..devices-1 (the Lightning 1.x default under smdistributed; Lightning 2.x picks it when
asked, as here). With the fix (AWS's documented one), world size and global rank come from the
launcher's ``WORLD_SIZE``/``RANK``. Every rank that trains writes ``/opt/ml/model/rank-<rank>.json``.
"""

import argparse
import json
import os
import socket

import pytorch_lightning as pl
import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401  (registers the smddp backend)
import torch
from pytorch_lightning.plugins.environments import LightningEnvironment
from pytorch_lightning.strategies import DDPStrategy

parser = argparse.ArgumentParser()
parser.add_argument("--fix", default="false")
args = parser.parse_args()


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, _index):
        return self.layer(batch[0]).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


env = LightningEnvironment()
if args.fix == "true":
    env.world_size = lambda: int(os.environ["WORLD_SIZE"])
    env.global_rank = lambda: int(os.environ["RANK"])
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=2)
trainer = pl.Trainer(accelerator="gpu", devices=int(os.environ["SM_NUM_GPUS"]),
                     num_nodes=len(json.loads(os.environ["SM_HOSTS"])),
                     strategy=DDPStrategy(cluster_environment=env, process_group_backend="smddp"),
                     max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False)
trainer.fit(Tiny(), data)
with open(f"/opt/ml/model/rank-{trainer.global_rank}.json", "w") as f:
    json.dump({"rank": trainer.global_rank, "world": trainer.world_size, "host": socket.gethostname()}, f)
