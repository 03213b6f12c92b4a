"""The ``smdistributed.dataparallel`` stand-in: backend ``smddp`` on gloo with SMDDP's limits."""

from __future__ import annotations

from typing import Any

import pytest

SMDDP_SCRIPT = """
import torch
import torch.distributed as dist
import smdistributed.dataparallel.torch.torch_smddp  # registers "smddp"

dist.init_process_group(backend="smddp")
assert dist.get_backend() == "smddp", dist.get_backend()
t = torch.tensor([1.0 + dist.get_rank()], device="cuda")
dist.all_reduce(t)
say("sum", t.item())
for name, call in [
    ("avg", lambda: dist.all_reduce(t, op=dist.ReduceOp.AVG)),
    ("subgroup", lambda: dist.new_group(ranks=[0])),
    ("mixing", lambda: dist.new_group(backend="gloo")),
    ("scatter", lambda: dist.scatter(t, [t, t] if dist.get_rank() == 0 else None, src=0)),
]:
    try:
        call()
        say(name, "ALLOWED")
    except RuntimeError as error:
        say(name, "error:", error)
gathered = [torch.zeros(1), torch.zeros(1)]
dist.all_gather(gathered, torch.tensor([float(dist.get_rank())]))
dist.broadcast(t, src=0)
dist.barrier()
say("collectives-ok", [g.item() for g in gathered])
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_smddp_backend_limits(run_script: Any) -> None:
    out = run_script(SMDDP_SCRIPT, nproc=2).ok()
    assert out.count("sum 3.0") == 2
    assert out.count("avg error: SMDDP does not support: ReduceOp\n") == 2
    assert out.count("subgroup error: SMDDP: The smddp backend currently does not support") == 2
    assert out.count("mixing error: SMDDP:") == 2
    assert out.count("scatter error: SMDDP does not support: scatter") == 2
    assert out.count("collectives-ok [0.0, 1.0]") == 2


OLD_API_SCRIPT = """
import torch
import smdistributed.dataparallel.torch.distributed as sdp
from smdistributed.dataparallel.torch.parallel.distributed import DistributedDataParallel as DDP

assert sdp.is_available()
sdp.init_process_group()
torch.cuda.set_device(sdp.get_local_rank())
t = torch.tensor([1.0 + sdp.get_rank()])
sdp.all_reduce(t, op=sdp.ReduceOp.AVERAGE)
m = torch.tensor([1.0 + sdp.get_rank()])
sdp.all_reduce(m, op=sdp.ReduceOp.MAX)
model = DDP(torch.nn.Linear(2, 1).cuda(), broadcast_buffers=False)
model(torch.ones(3, 2).cuda()).sum().backward()
sdp.barrier()
try:
    sdp.get_rank(group=object())
except RuntimeError as error:
    say("group error:", error)
say("old-api", sdp.get_rank(), sdp.get_world_size(), t.item(), m.item())
"""


@pytest.mark.slow
def test_old_smddp_api(run_script: Any) -> None:
    result = run_script(OLD_API_SCRIPT, nproc=2)
    out = result.ok()
    assert "old-api 0 2 1.5 2.0" in out and "old-api 1 2 1.5 2.0" in out
    assert "group error: Process group is not supported" in out
    assert "smdistributed.dataparallel.torch.dist is deprecated" in result.stderr
