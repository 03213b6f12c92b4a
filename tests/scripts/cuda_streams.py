"""A training loop as GPU code writes it: DDP on nccl, a side stream that prefetches the next
batch, CUDA events timing each step, NVTX ranges and marks, a torch.profiler window.

Each rank writes what it saw to ``$SM_MODEL_DIR/streams-rank-<rank>.json`` (merged into
model.tar.gz); the test reads those files.
"""

import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 4

dist.init_process_group("nccl")
rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1).cuda(), device_ids=[local_rank])
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

side = torch.cuda.Stream(priority=-1)
main = torch.cuda.current_stream()
generator = torch.Generator().manual_seed(rank)


def load_batch():
    with torch.cuda.stream(side):
        x = torch.randn(16, 8, generator=generator).pin_memory().cuda(non_blocking=True)
        y = x.sum(dim=1, keepdim=True)
        stream_inside = torch.cuda.current_stream() == side
    return x, y, stream_inside


outer_start = time.perf_counter_ns()
start = torch.cuda.Event(enable_timing=True)
start.record()
ends, step_ms, losses, inside = [], [], [], []
untimed = torch.cuda.Event()  # timing disabled: record, wait, query, synchronize still work
batch = load_batch()
for step in range(STEPS):
    torch.cuda.nvtx.range_push(f"step {step}")
    main.wait_stream(side)
    x, y, stream_inside = batch
    inside.append(stream_inside)
    x.record_stream(main)
    y.record_stream(main)
    step_start = torch.cuda.Event(enable_timing=True)
    step_start.record()
    with torch.cuda.nvtx.range("forward {}", step):
        loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    batch = load_batch()  # the next batch, "overlapping" the rest of this step
    untimed.record(main)
    side.wait_event(untimed)
    untimed.wait()
    end = torch.cuda.Event(enable_timing=True)
    end.record(main)
    end.synchronize()
    step_ms.append(step_start.elapsed_time(end))
    ends.append(end)
    losses.append(loss.item())
    torch.cuda.nvtx.mark(f"step {step} done")
    torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
side.synchronize()
outer_ms = (time.perf_counter_ns() - outer_start) / 1e6

with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
    torch.cuda.nvtx.range_push("profiled push")
    with torch.cuda.nvtx.range("profiled range"):
        model(torch.ones(2, 8, device="cuda")).sum().backward()
    torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.mark("profiled mark")
profiled = sorted({e.key for e in profiler.key_averages()} & {"profiled push", "profiled range", "profiled mark"})

try:
    untimed.elapsed_time(end)
    timing_disabled_error = ""
except (RuntimeError, ValueError) as error:
    timing_disabled_error = str(error)

report = {
    "rank": rank,
    "backend": dist.get_backend(),
    "losses": losses,
    "params": [p.detach().flatten().tolist() for p in model.parameters()],
    "step_ms": step_ms,
    "since_start_ms": [start.elapsed_time(e) for e in ends],
    "outer_ms": outer_ms,
    "stream_inside": inside,
    "side": {"device": str(side.device), "priority": side.priority, "query": side.query(),
             "is_default": side == torch.cuda.default_stream()},
    "main_is_default": main == torch.cuda.default_stream(),
    "event_query": untimed.query() and end.query(),
    "timing_disabled_error": timing_disabled_error,
    "profiled": profiled,
}
with open(os.path.join(os.environ["SM_MODEL_DIR"], f"streams-rank-{rank}.json"), "w") as f:
    json.dump(report, f)
dist.destroy_process_group()
