"""The ``smdistributed.dataparallel`` stand-in: backend ``smddp`` on gloo with SMDDP's limits."""

from __future__ import annotations

from typing import Any

import pytest

# Expected behaviour, from AWS (docs.aws.amazon.com/sagemaker/latest/dg/…) and public observations:
# - all_reduce(op=AVG) fails with "SMDDP does not support: ReduceOp" [observed:
#   aws/amazon-sagemaker-examples#3967, Lightning-AI/pytorch-lightning#20409];
# - barrier(device_ids=...) is not supported [documented: SMDDP 1.4.0 release notes];
# - "(For PyTorch DDP jobs only) The smddp backend currently does not support creating subprocess
#   groups with the torch.distributed.new_group() API. You also cannot use the smddp backend
#   concurrently with other process group backends such as NCCL and Gloo." [data-parallel-modify-sdp-pt.html];
# - SMDDP serves DDP, FSDP and DeepSpeed (same page), optimising AllReduce/AllGather and falling back
#   to NCCL for the other collectives [documented], so scatter & co. work; other ops than SUM/AVG are
#   not documented either way (the emulator allows them with a warning, smddp_strict refuses them).
PRELUDE_SMDDP = """
import torch
import torch.distributed as dist
import smdistributed.dataparallel.torch.torch_smddp  # registers "smddp"

dist.init_process_group(backend="smddp")
assert dist.get_backend() == "smddp", dist.get_backend()
t = torch.tensor([1.0 + dist.get_rank()], device="cuda")

def attempt(name, call):
    try:
        call()
        say(name, "ALLOWED")
    except RuntimeError as error:
        say(name, "error:", error)
"""

SMDDP_SCRIPT = PRELUDE_SMDDP + """
import smdistributed.dataparallel
say("version", smdistributed.dataparallel.__version__)
dist.all_reduce(t)
say("sum", t.item())
attempt("avg", lambda: dist.all_reduce(t, op=dist.ReduceOp.AVG))
attempt("max", lambda: dist.all_reduce(t.clone(), op=dist.ReduceOp.MAX))
attempt("scatter", lambda: dist.scatter(t, [t, t] if dist.get_rank() == 0 else None, src=0))
attempt("barrier-ids", lambda: dist.barrier(device_ids=[0]))
attempt("subgroup", lambda: dist.new_group(ranks=[0, 1]))  # no DDP model yet: FSDP/DeepSpeed may do this
attempt("ddp-after-subgroup", lambda: torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1)))
gathered = [torch.zeros(1), torch.zeros(1)]
dist.all_gather(gathered, torch.tensor([float(dist.get_rank())]))
dist.broadcast(t, src=0)
dist.barrier()
say("collectives-ok", [g.item() for g in gathered])
dist.destroy_process_group()
"""

DDP_FIRST_SCRIPT = PRELUDE_SMDDP + """
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
model(torch.ones(3, 2)).sum().backward()
attempt("subgroup-in-ddp-job", lambda: dist.new_group(ranks=[0, 1]))
attempt("mixing-in-ddp-job", lambda: dist.new_group(backend="gloo"))
dist.barrier()
dist.destroy_process_group()
"""

STRICT_SCRIPT = PRELUDE_SMDDP + """
attempt("max", lambda: dist.all_reduce(t.clone(), op=dist.ReduceOp.MAX))
attempt("scatter", lambda: dist.scatter(t, [t, t] if dist.get_rank() == 0 else None, src=0))
attempt("subgroup", lambda: dist.new_group(ranks=[0, 1]))
dist.barrier()
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_smddp_backend_refuses_what_is_documented_or_observed(run_script: Any) -> None:
    result = run_script(SMDDP_SCRIPT, nproc=2)
    out = result.ok()
    # SMDDP 2.5.0 (the latest in AWS's release notes, data-parallel-release-notes.html, Oct 2024) falls
    # back to NCCL for non-SMDDP collectives: the version reported matches the behaviour below
    assert out.count("version 2.5.0") == 2
    assert out.count("sum 3.0") == 2
    assert out.count("avg error: SMDDP does not support: ReduceOp\n") == 2
    assert out.count("barrier-ids error: SMDDP does not support: barrier(device_ids=...)") == 2
    # inferred limits: allowed, with a warning in the host log
    assert out.count("max ALLOWED") == 2 and out.count("scatter ALLOWED") == 2
    assert "smddp warning: all_reduce(op=MAX)" in result.stderr
    assert "smddp warning: scatter under smddp is not one of SMDDP's own collectives" in result.stderr
    # a sub-group is fine until the process becomes a DDP job
    assert out.count("subgroup ALLOWED") == 2
    assert out.count("ddp-after-subgroup error: SMDDP: (For PyTorch DDP jobs only)") == 2
    assert out.count("collectives-ok [0.0, 1.0]") == 2


@pytest.mark.slow
def test_smddp_subgroups_and_other_backends_fail_in_a_ddp_job(run_script: Any) -> None:
    out = run_script(DDP_FIRST_SCRIPT, nproc=2).ok()
    assert out.count("subgroup-in-ddp-job error: SMDDP: (For PyTorch DDP jobs only)") == 2
    assert out.count("mixing-in-ddp-job error: SMDDP: You also cannot use the smddp backend concurrently") == 2


@pytest.mark.slow
def test_smddp_strict_refuses_inferred_limits(run_script: Any) -> None:
    out = run_script(STRICT_SCRIPT, nproc=2, EMULATOR_SMDDP_STRICT="1").ok()
    assert out.count("max error: SMDDP does not support: ReduceOp") == 2
    assert out.count("scatter error: SMDDP does not support: scatter") == 2
    assert out.count("subgroup error: SMDDP: (For PyTorch DDP jobs only)") == 2


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
