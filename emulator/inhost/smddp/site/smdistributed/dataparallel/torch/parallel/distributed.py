"""Stand-in for ``smdistributed.dataparallel.torch.parallel.distributed`` (pre-1.4 API, B3).

``DistributedDataParallel(module, device_ids=None, output_device=None, broadcast_buffers=True,
process_group=None, bucket_cap_mb=None)``: documented to average gradients, use 25 MB buckets,
"not support broadcast buffer yet. Please set this to False", and accept only ``group.WORLD``.
Emulated as torch's DDP on the ``smddp`` stand-in group, with ``broadcast_buffers`` forced off
(and a warning when it was True). ``no_sync()`` comes from torch's DDP.
"""

from __future__ import annotations

from typing import Any

import torch

from smdistributed.dataparallel.torch import distributed as _sdp


class DistributedDataParallel(torch.nn.parallel.DistributedDataParallel):
    """Old SMDDP DDP wrapper, emulated with torch DDP on gloo."""

    def __init__(
        self,
        module: torch.nn.Module,
        device_ids: Any = None,
        output_device: Any = None,
        broadcast_buffers: bool = True,
        process_group: Any = None,
        bucket_cap_mb: float | None = None,
    ) -> None:
        _sdp._check_group(process_group)
        if broadcast_buffers:
            print(
                "smdistributed.dataparallel DistributedDataParallel does not support broadcast "
                "buffer yet. Please set this to False (emulator: running with False)",
                flush=True,
            )
        super().__init__(
            module,
            device_ids=device_ids,
            output_device=output_device,
            broadcast_buffers=False,
            bucket_cap_mb=25 if bucket_cap_mb is None else bucket_cap_mb,
        )
