"""``import smdistributed.dataparallel.torch.torch_smddp`` registers the ``smddp`` backend.

As documented (reference B2): after this import, ``torch.distributed.init_process_group(
backend="smddp")`` works and plain ``torch.nn.parallel.DistributedDataParallel`` is used. In the
emulator the group is a gloo group on the CPU, with SMDDP's limits enforced (see
``_emulated_backend``). Like the real library (B7, observed), importing it prints
``Environment variable SAGEMAKER_INSTANCE_TYPE is not set`` when that variable is missing.
"""

import os
import sys

from smdistributed.dataparallel.torch import _emulated_backend

if not os.environ.get("SAGEMAKER_INSTANCE_TYPE"):
    print("Environment variable SAGEMAKER_INSTANCE_TYPE is not set", file=sys.stderr, flush=True)

_emulated_backend.register()
