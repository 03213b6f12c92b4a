"""DDP with Adam on emulated GPUs: each rank reports what ``torch.cuda`` says it held.

A stack of ``LAYERS`` Linear(WIDTH, WIDTH) layers (fp32), trained ``STEPS`` steps with Adam on a
batch of ``BATCH`` rows per rank. Each rank writes ``/opt/ml/model/memory-rank<R>.json``: its own
``torch.cuda.max_memory_allocated()``/``max_memory_reserved()``, the parameter count, and the
allocation right after the model moved to the GPU (the weights alone).
"""

import json
import os

import torch
import torch.distributed as dist

LAYERS, WIDTH, BATCH, STEPS = 4, 512, 8, 3

dist.init_process_group("nccl")
rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
torch.manual_seed(0)
model = torch.nn.Sequential(*[m for _ in range(LAYERS) for m in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())])
model = model.cuda()
weights = torch.cuda.memory_allocated()
ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
optimizer = torch.optim.Adam(ddp.parameters(), lr=1e-3)
for _ in range(STEPS):
    x = torch.randn(BATCH, WIDTH).to("cuda")
    loss = ddp(x).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
report = {"rank": rank, "params": sum(p.numel() for p in model.parameters()), "weights": weights,
          "max_allocated": torch.cuda.max_memory_allocated(), "max_reserved": torch.cuda.max_memory_reserved(),
          "allocated": torch.cuda.memory_allocated(),
          "stats_peak": torch.cuda.memory_stats().get("allocated_bytes.all.peak")}
print("memory report", json.dumps(report), flush=True)
with open(f"/opt/ml/model/memory-rank{rank}.json", "w") as f:
    json.dump(report, f)
dist.destroy_process_group()
