"""A CUDA call the emulator does not emulate: ``torch.cuda.Stream``."""

import torch

stream = torch.cuda.Stream()
with torch.cuda.stream(stream):
    print(torch.ones(2).cuda() * 2)
