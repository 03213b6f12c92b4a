"""gloo all_reduce on every rank; records when its first statement ran and when it finished."""
import time

STARTED = time.time()

import os  # noqa: E402
import sys  # noqa: E402

from marks import mark  # noqa: E402

mark("first", STARTED)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
t = torch.ones(10_000)
for _ in range(int(os.environ.get("BENCH_STEPS", "20"))):
    dist.all_reduce(t)
dist.barrier()
ok = t[0].item() == dist.get_world_size() ** int(os.environ.get("BENCH_STEPS", "20"))
mark("done")
dist.destroy_process_group()
sys.exit(0 if ok else 3)
