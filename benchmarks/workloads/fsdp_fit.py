"""FSDP2 (``fully_shard`` over a CPU ``DeviceMesh``) training steps on a small MLP; records when its
first statement ran and when it finished. Written to run unchanged under ``torchrun`` by hand with
gloo on CPU (the baseline) and as the emulator's job: no CUDA call, so both time the same work
(FSDP v1 refuses a CPU-only machine: "FSDP needs a non-CPU accelerator device")."""
import time

STARTED = time.time()

import os  # noqa: E402
import sys  # noqa: E402

from marks import mark  # noqa: E402

mark("first", STARTED)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
for layer in (model[0], model[2]):
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
generator = torch.Generator().manual_seed(dist.get_rank())
for _ in range(int(os.environ.get("BENCH_STEPS", "20"))):
    x = torch.randn(32, 64, generator=generator)
    loss = torch.nn.functional.mse_loss(model(x), x)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
dist.barrier()
ok = bool(torch.isfinite(loss.detach()))
mark("done")
dist.destroy_process_group()
sys.exit(0 if ok else 3)
