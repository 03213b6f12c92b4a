"""gloo all_reduce on every rank; prints a timestamp as its very first line."""
import os
import socket
import sys
import time

print(f"BENCH_FIRST_LINE {time.time():.6f} {socket.gethostname()} {os.environ.get('RANK')}", flush=True)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
t = torch.ones(10_000)
for _ in range(int(os.environ.get("BENCH_STEPS", "20"))):
    dist.all_reduce(t)
dist.barrier()
ok = t[0].item() == dist.get_world_size() ** int(os.environ.get("BENCH_STEPS", "20"))
print(f"BENCH_DONE {time.time():.6f} rank={dist.get_rank()} world={dist.get_world_size()} ok={ok}",
      flush=True)
dist.destroy_process_group()
sys.exit(0 if ok else 3)
