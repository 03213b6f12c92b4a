"""Keeps allocating 1 GiB tensors on the one emulated GPU until CUDA runs out of memory.

``torch.empty`` of an emulated GPU is a CPU allocation that is never written, so the host's RAM is
not touched: the pages are mapped lazily.
"""

import torch

held = []
while True:
    held.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
    print(f"holding {len(held)} GiB; allocated {torch.cuda.memory_allocated()}", flush=True)
