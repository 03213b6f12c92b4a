"""A CUDA call the emulator does not emulate: capturing a CUDA graph."""

import torch

graph = torch.cuda.CUDAGraph()
static_input = torch.ones(2).cuda()
with torch.cuda.graph(graph):
    static_output = static_input * 2
graph.replay()
print(static_output)
