"""CUDA calls work on the CPU; unsupported CUDA features say ``not emulated``."""

from __future__ import annotations

from typing import Any

CUDA_SCRIPT = """
import torch

assert torch.cuda.is_available() and torch.cuda.device_count() == 2
torch.cuda.set_device(1)
assert torch.cuda.current_device() == 1
assert torch.cuda.get_device_name(0) == "NVIDIA A100-SXM4-40GB"
assert torch.cuda.get_device_capability() == (8, 0)
torch.cuda.manual_seed_all(0)
torch.cuda.synchronize()
torch.cuda.empty_cache()
assert torch.cuda.memory_allocated() == 0 and torch.cuda.max_memory_allocated(0) == 0
with torch.cuda.device(0):
    assert torch.cuda.current_device() == 0
tensors = [
    torch.ones(2).cuda(), torch.ones(2).to("cuda"), torch.ones(2).to("cuda:1"),
    torch.ones(2).to(torch.device("cuda", 1)), torch.zeros(2, device="cuda"),
    torch.tensor([1.0], device=torch.device("cuda", 0)), torch.randn(3, device="cuda:1"),
    torch.ones(2).new_zeros(3, device="cuda"), torch.ones(2).pin_memory(),
]
assert all(t.device.type == "cpu" for t in tensors)
model = torch.nn.Linear(2, 1).cuda().to("cuda:0")
assert next(model.parameters()).device.type == "cpu"
# no stream ever captures a graph (torch 2.2's Optimizer.step asks on a CUDA build; a CPU build's
# original raises): False, from torch.cuda and torch.cuda.graphs alike
assert torch.cuda.is_current_stream_capturing() is False
assert torch.cuda.graphs.is_current_stream_capturing() is False
optimizer = torch.optim.Adam(model.parameters())
model(torch.ones(1, 2, device="cuda")).sum().backward()
optimizer.step()
say("cuda-ok")
for name, call in [
    ("torch.cuda.ExternalStream", lambda: torch.cuda.ExternalStream(1)),
    ("torch.cuda.Event.ipc_handle", lambda: torch.cuda.Event(interprocess=True).ipc_handle()),
    ("torch.cuda.CUDAGraph", lambda: torch.cuda.CUDAGraph()),
    ("torch.cuda.nccl.all_reduce", lambda: torch.cuda.nccl.all_reduce([])),
]:
    try:
        call()
    except RuntimeError as error:
        assert str(error).startswith(f"not emulated: {name}"), error
        say("refused", name)
try:
    torch.zeros(1, device="cuda:2")
except RuntimeError as error:
    assert "invalid device ordinal" in str(error)
    say("ordinal-ok")
"""


def test_cuda_calls_run_on_cpu(run_script: Any) -> None:
    result = run_script(CUDA_SCRIPT, EMULATOR_GPU_MODEL="NVIDIA A100-SXM4-40GB")
    out = result.ok()
    assert "cuda-ok" in out
    assert out.count("refused") == 4
    assert "ordinal-ok" in out
    assert "[emulator]" in result.stderr
    assert result.stderr.count("torch.cuda reports 2 emulated") == 1


def test_no_gpus_means_no_patches(run_script: Any) -> None:
    out = run_script("import torch; say('available', torch.cuda.is_available())", gpus=0).ok()
    assert "available False" in out


DDP_SCRIPT = """
import os
import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler

dist.init_process_group(backend="nccl")
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
assert dist.get_backend() == "gloo"
t = torch.tensor([1.0 + dist.get_rank()], device="cuda")
dist.all_reduce(t)
assert t.item() == 3.0, t
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Linear(2, 1).cuda(local_rank), device_ids=[local_rank]
)
model(torch.ones(4, 2, device="cuda")).sum().backward()
dist.barrier(device_ids=[local_rank])
DistributedSampler(range(8))
DistributedSampler(range(8), num_replicas=4, rank=dist.get_rank())
say("ddp-ok", dist.get_rank())
dist.destroy_process_group()
"""


def test_nccl_ddp_and_diagnostics_under_torchrun(run_script: Any, tmp_path: Any) -> None:
    from emulator.diagnostics.topology import analyze

    diag = tmp_path / "diag"
    result = run_script(DDP_SCRIPT, nproc=2, EMULATOR_DIAG_DIR=str(diag))
    out = result.ok()
    assert "ddp-ok 0" in out and "ddp-ok 1" in out
    assert "'nccl' runs on gloo" in result.stderr
    from emulator.inhost.protocol import COLLECTIVES_PREFIX, EXIT_PREFIX, RDZV_PREFIX, STACKS_PREFIX

    others = (COLLECTIVES_PREFIX, EXIT_PREFIX, STACKS_PREFIX, RDZV_PREFIX)
    records = [p for p in diag.glob("*.json") if not p.name.startswith(others)]
    assert len(records) == 2  # one topology record per rank (other observers' records aside)
    kinds = sorted(d.kind for d in analyze(diag))
    assert kinds == ["sampler-mismatch", "sampler-mismatch"], analyze(diag)
