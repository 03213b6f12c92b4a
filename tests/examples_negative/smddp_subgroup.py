"""A sub-group in a DDP job under SMDDP: ``dist.new_group`` with the smddp backend, then DDP, which
SMDDP does not support ("(For PyTorch DDP jobs only) The smddp backend currently does not support
creating subprocess groups with the torch.distributed.new_group() API", AWS's
data-parallel-modify-sdp-pt.html)."""

import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401
import torch
import torch.distributed as dist

dist.init_process_group("smddp")
group = dist.new_group(ranks=[0, 1])
print("created a sub-group", group)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
