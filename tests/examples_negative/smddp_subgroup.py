"""A sub-group under SMDDP: ``dist.new_group`` with the smddp backend, which SMDDP does not support."""

import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401
import torch.distributed as dist

dist.init_process_group("smddp")
group = dist.new_group(ranks=[0, 1])
print("created a sub-group", group)
