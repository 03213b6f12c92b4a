"""PyTorch part of the SMDDP stand-in: ``torch_smddp`` (current API), ``distributed`` and
``parallel`` (pre-1.4 API)."""
